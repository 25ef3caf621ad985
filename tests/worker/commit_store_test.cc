// CommitStore on a small host TensorCollection: commits restore the exact shards, regions and
// scalars; newer commits are dropped on a rollback; at most two commits are kept and their memory
// is reused; the rollback decision and the "state is still the commit" check see a step change and
// a layout change; every change reaches the observer.
#include "worker/commit_store.h"
#include "state/tensor_collection_access.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace elastra {
namespace {

class CommitStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(state_.AddTensor("w", {4, 4}, DataType::kFloat64, SplitOverTp(0)).ok());
    ASSERT_TRUE(state_.AddTensor("b", {4}, DataType::kFloat32).ok());
    ASSERT_TRUE(state_.AddScalar(kStepScalarName, 0).ok());
    ASSERT_TRUE(state_.AddScalar("cursor", 0).ok());
  }

  // Writes values that tell step `step` apart into every element and scalar.
  void Train(int64_t step) {
    state_.SetScalar(kStepScalarName, step);
    state_.SetScalar("cursor", 100 * step);
    for (double& x : state_.View<double>("w")) x = static_cast<double>(step);
    for (float& x : state_.View<float>("b")) x = static_cast<float>(-step);
  }

  void ExpectState(int64_t step) {
    EXPECT_EQ(state_.GetScalar(kStepScalarName), step);
    EXPECT_EQ(state_.GetScalar("cursor"), 100 * step);
    for (double x : state_.View<double>("w")) EXPECT_EQ(x, static_cast<double>(step));
    for (float x : state_.View<float>("b")) EXPECT_EQ(x, static_cast<float>(-step));
  }

  // Gives "w" the shard of tensor rank `tp_rank` of 2 (a change of layout), zero-filled.
  void Reshard(int tp_rank) {
    auto& w = TensorCollectionAccess::Tensors(state_)[0];
    Coordinates c;
    c.rank = c.tp_rank = tp_rank;
    w.region = LocalRegion(w.spec, state_.num_layers(), Layout{1, 1, 2}, c);
    w.data.assign(static_cast<size_t>(w.region.elements()) * sizeof(double), 0);
  }

  TensorCollection state_;
  int changes_ = 0;
  CommitStore store_{&state_, [this] { ++changes_; }};
};

TEST_F(CommitStoreTest, RestoreBringsBackShardsScalarsAndRegions) {
  Train(3);
  ASSERT_TRUE(store_.Commit().ok());
  const Region whole = state_.region("w");
  Train(5);
  Reshard(1);
  ASSERT_TRUE(store_.Restore(3).ok());
  ExpectState(3);
  EXPECT_EQ(state_.region("w").flat_begin, whole.flat_begin);
  EXPECT_EQ(state_.region("w").flat_end, whole.flat_end);
  EXPECT_EQ(state_.View<double>("w").size(), 16u);
  EXPECT_EQ(store_.steps(), (std::vector<int64_t>{3}));
}

TEST_F(CommitStoreTest, CommitOfTheSameStepIsMadeOnce) {
  Train(2);
  ASSERT_TRUE(store_.Commit().ok());
  state_.View<double>("w")[0] = 42;  // the same step: the commit is not made again
  ASSERT_TRUE(store_.Commit().ok());
  EXPECT_EQ(store_.steps(), (std::vector<int64_t>{2}));
  EXPECT_EQ(changes_, 1);
  ASSERT_TRUE(store_.Restore(2).ok());
  EXPECT_EQ(state_.View<double>("w")[0], 2.0);
}

TEST_F(CommitStoreTest, KeepsTwoCommitsAndReusesTheOldestImage) {
  Train(1);
  ASSERT_TRUE(store_.Commit().ok());
  const uint8_t* first = store_.newest()->tensors[0].data();
  Train(2);
  ASSERT_TRUE(store_.Commit().ok());
  Train(3);
  ASSERT_TRUE(store_.Commit().ok());
  EXPECT_EQ(store_.steps(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(store_.newest()->tensors[0].data(), first);  // step 1's memory, not a new image
  EXPECT_EQ(store_.spare_images(), 0u);
}

TEST_F(CommitStoreTest, RollbackDropsNewerCommitsAsAnAbandonedTimeline) {
  Train(10);
  ASSERT_TRUE(store_.Commit().ok());
  Train(20);
  ASSERT_TRUE(store_.Commit().ok());
  Train(23);
  ASSERT_TRUE(store_.Restore(10).ok());
  ExpectState(10);
  EXPECT_EQ(store_.steps(), (std::vector<int64_t>{10}));
  EXPECT_EQ(store_.spare_images(), 1u);  // step 20's image, kept for the next commit
}

TEST_F(CommitStoreTest, RestoreOfAStepNotHeldFails) {
  Train(10);
  ASSERT_TRUE(store_.Commit().ok());
  Train(12);
  Status s = store_.Restore(11);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s;
  EXPECT_EQ(state_.GetScalar(kStepScalarName), 12);  // the state is left alone
  EXPECT_EQ(store_.Restore(11).code(), StatusCode::kFailedPrecondition);
  CommitStore empty(&state_, nullptr);
  EXPECT_EQ(empty.Restore(0).code(), StatusCode::kFailedPrecondition);
}

TEST_F(CommitStoreTest, MatchesStateOnlyAtTheCommittedStepAndRegions) {
  EXPECT_FALSE(store_.MatchesState());  // nothing committed
  Train(4);
  ASSERT_TRUE(store_.Commit().ok());
  EXPECT_TRUE(store_.MatchesState());
  Train(5);
  EXPECT_FALSE(store_.MatchesState());  // another step
  state_.SetScalar(kStepScalarName, 4);
  EXPECT_TRUE(store_.MatchesState());
  Reshard(0);  // the same step, other shards: a layout change or a partial move
  EXPECT_FALSE(store_.MatchesState());
}

TEST_F(CommitStoreTest, RollBackDecision) {
  Train(6);
  ASSERT_TRUE(store_.Commit().ok());
  EXPECT_FALSE(store_.MustRollBack(6));  // paused at the step everyone restores: keep going
  Train(7);
  EXPECT_TRUE(store_.MustRollBack(6));  // one step ahead of the common commit
  ASSERT_TRUE(store_.Restore(6).ok());
  EXPECT_FALSE(store_.MustRollBack(6));
  // A build that failed after its move began: the step is the commit's, the shards are not.
  Reshard(1);
  EXPECT_TRUE(store_.MustRollBack(6));
  ASSERT_TRUE(store_.Restore(6).ok());
  ExpectState(6);
  EXPECT_FALSE(store_.MustRollBack(6));
}

TEST_F(CommitStoreTest, ForgetKeepsTheMemoryForTheNextCommit) {
  Train(1);
  ASSERT_TRUE(store_.Commit().ok());
  const uint8_t* image = store_.newest()->tensors[0].data();
  store_.Forget();
  EXPECT_TRUE(store_.empty());
  EXPECT_EQ(store_.spare_images(), 1u);
  EXPECT_EQ(store_.Restore(1).code(), StatusCode::kFailedPrecondition);
  Train(2);
  ASSERT_TRUE(store_.Commit().ok());
  EXPECT_EQ(store_.newest()->tensors[0].data(), image);
  EXPECT_EQ(store_.spare_images(), 0u);
}

TEST_F(CommitStoreTest, KeepNewestOnlyKeepsTheOthersMemory) {
  Train(1);
  ASSERT_TRUE(store_.Commit().ok());
  Train(2);
  ASSERT_TRUE(store_.Commit().ok());
  store_.KeepNewestOnly();
  EXPECT_EQ(store_.steps(), (std::vector<int64_t>{2}));
  EXPECT_EQ(store_.spare_images(), 1u);
  EXPECT_TRUE(store_.MatchesState());
}

TEST_F(CommitStoreTest, ReleaseFreesEverything) {
  Train(1);
  ASSERT_TRUE(store_.Commit().ok());
  Train(2);
  ASSERT_TRUE(store_.Commit().ok());
  ASSERT_TRUE(store_.Restore(1).ok());
  store_.Prefault(store_.ShardSizes());
  store_.Release();
  EXPECT_TRUE(store_.empty());
  EXPECT_EQ(store_.spare_images(), 0u);
  EXPECT_FALSE(store_.prefaulting());
}

TEST_F(CommitStoreTest, PrefaultsOnlyWhileFewerThanTwoImagesAreHeld) {
  store_.Prefault(store_.ShardSizes());
  EXPECT_TRUE(store_.prefaulting());
  Train(1);
  ASSERT_TRUE(store_.Commit().ok());  // takes the prefaulted image
  EXPECT_FALSE(store_.prefaulting());
  store_.Prefault(store_.ShardSizes());  // one held: one more may come
  EXPECT_TRUE(store_.prefaulting());
  Train(2);
  ASSERT_TRUE(store_.Commit().ok());
  EXPECT_FALSE(store_.prefaulting());
  store_.Prefault(store_.ShardSizes());  // two held: nothing more
  EXPECT_FALSE(store_.prefaulting());
}

TEST_F(CommitStoreTest, ASpareThatFitsIsTakenBeforeThePrefaultedImage) {
  Train(1);
  ASSERT_TRUE(store_.Commit().ok());
  const uint8_t* image = store_.newest()->tensors[0].data();
  store_.Forget();                       // one spare image of the whole tensors
  store_.Prefault(store_.ShardSizes());  // and one coming
  ASSERT_TRUE(store_.prefaulting());
  Train(2);
  ASSERT_TRUE(store_.Commit().ok());
  EXPECT_EQ(store_.newest()->tensors[0].data(), image);
  EXPECT_TRUE(store_.prefaulting());  // still there for the next commit
}

TEST_F(CommitStoreTest, ThePrefaultedImageIsTakenWhenTheSpareIsTooSmall) {
  Reshard(0);  // half of "w"
  Train(1);
  ASSERT_TRUE(store_.Commit().ok());
  store_.Forget();  // a spare image of half shards
  std::vector<size_t> whole = {16 * sizeof(double), 4 * sizeof(float)};
  store_.Prefault(whole);
  // The state grows back to whole tensors (a shrink from tp=2 to tp=1).
  auto& w = TensorCollectionAccess::Tensors(state_)[0];
  w.region = LocalRegion(w.spec, state_.num_layers(), Layout{}, Coordinates{});
  w.data.assign(16 * sizeof(double), 0);
  Train(2);
  ASSERT_TRUE(store_.Commit().ok());
  EXPECT_FALSE(store_.prefaulting());
  EXPECT_EQ(store_.spare_images(), 1u);  // the small one is left
  ASSERT_TRUE(store_.Restore(2).ok());
  ExpectState(2);
}

// The pause commit: listed (and published) at once, its copy on another thread; what it holds is
// the state as it was when it started, and every other method waits for the copy.
TEST_F(CommitStoreTest, ABackgroundCommitCountsAtOnceAndRestoresExactly) {
  Train(4);
  ASSERT_TRUE(store_.CommitInBackground().ok());
  EXPECT_EQ(store_.steps(), (std::vector<int64_t>{4}));
  EXPECT_FALSE(store_.empty());
  EXPECT_EQ(changes_, 1);
  EXPECT_TRUE(store_.MatchesState());  // waits for the copy
  store_.Settle();                     // nothing left to wait for
  Train(5);
  Reshard(1);
  ASSERT_TRUE(store_.Restore(4).ok());
  ExpectState(4);
  EXPECT_EQ(state_.View<double>("w").size(), 16u);
}

TEST_F(CommitStoreTest, ABackgroundCommitOfTheSameStepIsMadeOnce) {
  Train(2);
  ASSERT_TRUE(store_.Commit().ok());
  ASSERT_TRUE(store_.CommitInBackground().ok());
  EXPECT_EQ(store_.steps(), (std::vector<int64_t>{2}));
  EXPECT_EQ(changes_, 1);
}

TEST_F(CommitStoreTest, ABackgroundCommitReusesTheOldestImage) {
  Train(1);
  ASSERT_TRUE(store_.Commit().ok());
  const uint8_t* first = store_.newest()->tensors[0].data();
  Train(2);
  ASSERT_TRUE(store_.Commit().ok());
  Train(3);
  ASSERT_TRUE(store_.CommitInBackground().ok());
  EXPECT_EQ(store_.steps(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(store_.newest()->tensors[0].data(), first);  // after the copy
  ASSERT_TRUE(store_.Restore(3).ok());
  ExpectState(3);
  ASSERT_TRUE(store_.Restore(2).ok());
  ExpectState(2);
}

TEST_F(CommitStoreTest, ABackgroundCommitTakesThePrefaultedImageOnItsOwnThread) {
  Train(1);
  store_.Prefault(store_.ShardSizes());
  ASSERT_TRUE(store_.prefaulting());
  ASSERT_TRUE(store_.CommitInBackground().ok());
  EXPECT_FALSE(store_.prefaulting()) << "the copy's thread waits for it, not the caller";
  store_.Settle();
  Train(7);
  ASSERT_TRUE(store_.Restore(1).ok());
  ExpectState(1);
}

TEST_F(CommitStoreTest, EveryChangeReachesTheObserver) {
  Train(1);
  ASSERT_TRUE(store_.Commit().ok());
  EXPECT_EQ(changes_, 1);
  Train(2);
  ASSERT_TRUE(store_.Commit().ok());
  EXPECT_EQ(changes_, 2);
  ASSERT_TRUE(store_.Restore(1).ok());
  EXPECT_EQ(changes_, 3);
  store_.KeepNewestOnly();
  EXPECT_EQ(changes_, 4);
  store_.Forget();
  EXPECT_EQ(changes_, 5);
  store_.Release();
  EXPECT_EQ(changes_, 6);
}

}  // namespace
}  // namespace elastra
