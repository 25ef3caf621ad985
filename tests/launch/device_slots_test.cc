// DeviceSlots: the GPU that `elastra run --gpus N` gives each worker.
#include "launch/device_slots.h"

#include <gtest/gtest.h>

namespace elastra::launch {
namespace {

TEST(DeviceSlots, EachWorkerGetsTheLowestFreeDevice) {
  DeviceSlots slots(3);
  EXPECT_EQ(slots.Acquire("w0"), 0);
  EXPECT_EQ(slots.Acquire("w1"), 1);
  EXPECT_EQ(slots.Acquire("w2"), 2);
  EXPECT_EQ(slots.Acquire("w1"), 1);  // the same worker asks again: the same device
  slots.Release("w1");
  EXPECT_EQ(slots.Acquire("w3"), 1);  // a replacement takes the freed device
  slots.Release("nobody");            // ignored
  slots.Release("w0");
  slots.Release("w0");                // twice: ignored
  EXPECT_EQ(slots.Acquire("w4"), 0);
}

TEST(DeviceSlots, MoreWorkersThanDevicesShareTheLeastUsed) {
  DeviceSlots slots(2);
  EXPECT_EQ(slots.Acquire("a"), 0);
  EXPECT_EQ(slots.Acquire("b"), 1);
  EXPECT_EQ(slots.Acquire("c"), 0);
  EXPECT_EQ(slots.Acquire("d"), 1);
  slots.Release("b");
  slots.Release("d");
  EXPECT_EQ(slots.Acquire("e"), 1);
  EXPECT_EQ(DeviceSlots(0).devices(), 1);  // at least one device
}

}  // namespace
}  // namespace elastra::launch
