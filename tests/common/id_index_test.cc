// IdIndex (common/id_index.h): every indexed id is found at its position, others are not, and the
// table stays right past the sizes where it grows and with ids whose hashes collide in the table.
#include "common/id_index.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace elastra {
namespace {

TEST(IdIndex, FindsEveryIdAtItsPositionAndNothingElse) {
  for (size_t n : {0u, 1u, 7u, 8u, 9u, 1000u, 16384u}) {
    std::vector<std::string> ids;
    for (size_t i = 0; i < n; ++i) ids.push_back("w" + std::to_string(i * 7919 % 100003));
    IdIndex index;
    EXPECT_EQ(index.Find("w1"), IdIndex::kNone);  // nothing indexed yet
    index.Build(&ids);
    EXPECT_EQ(index.size(), n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(index.Find(ids[i]), i) << ids[i] << ", n = " << n;
    EXPECT_EQ(index.Find("x0"), IdIndex::kNone);
    EXPECT_EQ(index.Find(""), IdIndex::kNone);
    EXPECT_EQ(index.Find("w100003"), IdIndex::kNone);
    index.Clear();
    EXPECT_EQ(index.size(), 0u);
    if (n > 0) EXPECT_EQ(index.Find(ids[0]), IdIndex::kNone);
  }
}

TEST(IdIndex, BuildingAgainIndexesTheNewList) {
  std::vector<std::string> a = {"a", "b", "c"};
  std::vector<std::string> b = {"c", "d"};
  IdIndex index;
  index.Build(&a);
  EXPECT_EQ(index.Find("c"), 2u);
  index.Build(&b);
  EXPECT_EQ(index.Find("c"), 0u);
  EXPECT_EQ(index.Find("d"), 1u);
  EXPECT_EQ(index.Find("a"), IdIndex::kNone);
}

TEST(IdIndex, BuildSaysWhetherTheIdsAreDistinctAndFindsTheFirstOfTwins) {
  std::vector<std::string> distinct = {"w0", "w1", "w2"};
  std::vector<std::string> twins = {"w0", "w1", "w2", "w1"};
  IdIndex index;
  EXPECT_TRUE(index.Build(&distinct));
  EXPECT_FALSE(index.Build(&twins));
  EXPECT_EQ(index.Find("w1"), 1u);
  EXPECT_EQ(index.Find("w2"), 2u);
}

// A hint is only where to look first: right, wrong, out of range or with nothing indexed, Find
// answers as without it.
TEST(IdIndex, AHintedFindAnswersAsTheIndex) {
  std::vector<std::string> ids = {"w0", "w1", "w2"};
  IdIndex index;
  EXPECT_EQ(index.Find("w1", 1), IdIndex::kNone);  // nothing indexed yet
  index.Build(&ids);
  EXPECT_EQ(index.Find("w1", 1), 1u);
  EXPECT_EQ(index.Find("w1", 0), 1u);
  EXPECT_EQ(index.Find("w2", 99), 2u);
  EXPECT_EQ(index.Find("w2", IdIndex::kNone), 2u);
  EXPECT_EQ(index.Find("x", 0), IdIndex::kNone);
  index.Clear();
  EXPECT_EQ(index.Find("w0", 0), IdIndex::kNone);
}

}  // namespace
}  // namespace elastra
