// The client's side of the lease (protocol/control_client.h; docs/hosts.md, "Partitions and
// fencing"): Lease as a pure object stepped by hand, LeaseFor's arithmetic and floor, and a
// ControlClient over a scripted coordinator whose lease runs on a FakeClock: a coordinator that
// never acks grants no lease, the first HeartbeatAck arms it, silence fences, the fence outlives
// the next ack, and only Unfence() lifts it.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "protocol/control_client.h"
#include "tests/worker/fake_coordinator.h"

namespace elastra {
namespace {

using std::chrono::hours;
using std::chrono::milliseconds;
using testing::FakeCoordinator;

TimePoint At(int64_t ms) { return TimePoint(milliseconds(ms)); }

TEST(ControlClientLease, NoLeaseBeforeTheFirstAck) {
  Lease lease;
  lease.set_duration(milliseconds(100));
  lease.Heard(At(0), /*ack=*/false);  // a reply, say: not an ack
  EXPECT_FALSE(lease.armed());
  EXPECT_FALSE(lease.Fenced(At(3600 * 1000)));
  lease.Heard(At(3600 * 1000), /*ack=*/false);
  EXPECT_FALSE(lease.Fenced(At(7200 * 1000)));
}

TEST(ControlClientLease, SilenceLongerThanTheLeaseFencesAndTheFenceSticks) {
  Lease lease;
  lease.set_duration(milliseconds(100));
  lease.Heard(At(0), /*ack=*/true);
  EXPECT_TRUE(lease.armed());
  EXPECT_FALSE(lease.Fenced(At(100)));  // exactly the lease: still held
  EXPECT_TRUE(lease.Fenced(At(101)));
  lease.Heard(At(150), true);  // renewed, but it ran out once: still fenced
  EXPECT_TRUE(lease.Fenced(At(160)));
  lease.Unfence();
  EXPECT_FALSE(lease.Fenced(At(160)));
  EXPECT_FALSE(lease.Fenced(At(250)));
  EXPECT_TRUE(lease.Fenced(At(251)));
}

// Nobody asked while the lease was out: the message that ends the silence fences all the same.
TEST(ControlClientLease, AGapSeenOnlyByTheNextMessageFences) {
  Lease lease;
  lease.set_duration(milliseconds(100));
  lease.Heard(At(0), true);
  lease.Heard(At(90), true);
  lease.Heard(At(500), true);
  EXPECT_TRUE(lease.Fenced(At(501)));
  EXPECT_EQ(lease.last_heard(), At(500));
}

TEST(ControlClientLease, ZeroDurationNeverFences) {
  Lease lease;
  lease.Heard(At(0), true);
  EXPECT_FALSE(lease.Fenced(At(3600 * 1000)));
  lease.set_duration(milliseconds(-5));
  EXPECT_FALSE(lease.Fenced(At(7200 * 1000)));
}

TEST(ControlClientLease, LeaseForRunsOutBeforeTheCoordinatorsDeadline) {
  // The defaults: 1500 ms timeout, 200 ms heartbeats on both sides.
  EXPECT_EQ(LeaseFor(milliseconds(1500), milliseconds(200), milliseconds(200)), milliseconds(1100));
  // The larger interval counts: the worker's own heartbeats pace the acks.
  EXPECT_EQ(LeaseFor(milliseconds(1500), milliseconds(200), milliseconds(300)), milliseconds(900));
  EXPECT_EQ(LeaseFor(milliseconds(1500), milliseconds(300), milliseconds(100)), milliseconds(900));
  // The floor: halfway between the interval and the timeout, never under an ack's spacing.
  EXPECT_EQ(LeaseFor(milliseconds(1500), milliseconds(500), milliseconds(200)), milliseconds(1000));
  EXPECT_EQ(LeaseFor(milliseconds(1500), milliseconds(1000), milliseconds(200)),
            milliseconds(1250));
  for (auto interval :
       {milliseconds(10), milliseconds(200), milliseconds(700), milliseconds(1400)}) {
    const Duration lease = LeaseFor(milliseconds(1500), interval, interval);
    EXPECT_GT(lease, interval) << interval.count();
    EXPECT_LT(lease, milliseconds(1500)) << interval.count();
  }
  // No sane lease: heartbeats as slow as the deadline, or no deadline at all.
  EXPECT_EQ(LeaseFor(milliseconds(1500), milliseconds(1500), milliseconds(200)), milliseconds(0));
  EXPECT_EQ(LeaseFor(milliseconds(0), milliseconds(200), milliseconds(200)), milliseconds(0));
}

// Polls `done` until it holds or the bound (a broken test's, not a timing guess) passes.
template <class Fn>
bool Eventually(Fn done, milliseconds bound = milliseconds(60000)) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(1));
  }
  return true;
}

TEST(ControlClientLease, ClientArmsOnAckFencesOnSilenceAndStaysFencedUntilLifted) {
  FakeCoordinator::Options fo;
  fo.acks = false;
  fo.form_on_join = false;
  FakeCoordinator fake(fo);
  FakeClock clock;
  ControlClientOptions o;
  o.address = fake.address();
  o.server_public = fake.public_key();
  o.client_keys = fake.client_keys();
  o.job = "fake";
  o.sender = "w0";
  o.heartbeat_interval = milliseconds(10);
  o.clock = &clock;
  auto client = ControlClient::Connect(o);
  ASSERT_TRUE(client.ok()) << client.status();
  (*client)->SetLease(milliseconds(100));

  // Heartbeats go unanswered: no lease is granted, however long the silence.
  ASSERT_TRUE(fake.WaitFor(proto::MessageType::kHeartbeat, 3).has_value());
  clock.Advance(hours(1));
  EXPECT_FALSE((*client)->Fenced());
  EXPECT_FALSE((*client)->lease().armed);

  fake.SetGeneration(7);
  fake.SetAcks(true);
  ASSERT_TRUE(Eventually([&] { return (*client)->lease().armed; }));
  EXPECT_EQ((*client)->lease().acked_generation, 7u);
  EXPECT_EQ((*client)->lease().duration, milliseconds(100));
  EXPECT_FALSE((*client)->Fenced());

  clock.Advance(milliseconds(101));
  EXPECT_TRUE((*client)->Fenced());
  // The next ack renews the lease (silence back to zero on the fake clock): still fenced.
  ASSERT_TRUE(Eventually([&] { return (*client)->lease().silence == milliseconds(0); }));
  EXPECT_TRUE((*client)->Fenced());
  (*client)->Unfence();
  EXPECT_FALSE((*client)->Fenced());

  // A partition: the coordinator goes silent, and the lease runs out again.
  fake.SetSilent(true);
  clock.Advance(milliseconds(101));
  EXPECT_TRUE((*client)->Fenced());
  EXPECT_TRUE((*client)->lease().fenced);
  (*client)->Close();
}

}  // namespace
}  // namespace elastra
