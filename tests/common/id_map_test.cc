// IdMap (common/id_map.h): against std::unordered_map over random inserts, replacements and
// erases, with the standard hash and with hashes that collide (long probe runs that wrap around
// the table, which backward-shift deletion must keep reachable); values never move, and each keeps
// its slot, which AtSlot finds it by; the prefetching calls guess that slot (exactly where no two
// ids' hashes agree, a live slot or none where they do).
#include "common/id_map.h"

#include <algorithm>
#include <random>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <gtest/gtest.h>

namespace elastra {
namespace {

struct Value {
  std::string id;
  int payload = 0;
};

// Eight distinct hashes for every id: runs of collisions much longer than the standard hash's.
struct CollidingHash {
  size_t operator()(std::string_view id) const { return std::hash<std::string_view>{}(id) % 8; }
};
// High hashes put the runs at the table's end, so that they wrap around to its start.
struct WrappingHash {
  size_t operator()(std::string_view id) const {
    return ~size_t{0} - std::hash<std::string_view>{}(id) % 4;
  }
};

// `exact_guesses`: no two ids' hashes agree, so GuessSlot finds each id's own slot and no slot for
// an id not held.
template <typename Map>
void CheckAgainstUnorderedMap(uint32_t seed, int ids, int operations, bool exact_guesses) {
  Map map;
  std::unordered_map<std::string, int> want;
  std::unordered_map<std::string, const Value*> where;  // what Find returned when inserted
  std::unordered_map<std::string, uint32_t> slot_of;    // what Emplace said
  size_t most = 0;                                      // values held at once
  std::mt19937 rng(seed);
  for (int op = 0; op < operations; ++op) {
    const std::string id = "w" + std::to_string(rng() % ids);
    const int payload = static_cast<int>(rng());
    if (rng() % 3 == 0) {
      EXPECT_EQ(map.Erase(id), want.erase(id) == 1) << id;
      if (slot_of.count(id) > 0) {
        EXPECT_EQ(map.AtSlot(slot_of[id]), nullptr) << "an erased value's slot: " << id;
      }
      where.erase(id);
      slot_of.erase(id);
    } else {
      uint32_t slot = IdMap<Value>::kNoSlot;
      auto [v, inserted] = map.Emplace(Value{id, payload}, &slot);
      EXPECT_EQ(inserted, want.count(id) == 0) << id;
      if (!inserted) {
        EXPECT_EQ(v, where[id]) << "a replaced value moved: " << id;
        EXPECT_EQ(slot, slot_of[id]) << "a replaced value changed its slot: " << id;
      }
      want[id] = payload;
      where[id] = v;
      slot_of[id] = slot;
      most = std::max(most, want.size());
    }
    ASSERT_EQ(map.size(), want.size());
    if (op % 97 == 0 || op + 1 == operations) {
      for (int i = 0; i < ids; ++i) {
        const std::string probe = "w" + std::to_string(i);
        const Value* v = map.Find(probe);
        auto it = want.find(probe);
        map.PrefetchProbe(probe);
        const uint32_t guess = map.PrefetchValue(probe);
        ASSERT_EQ(map.GuessSlot(probe), guess) << probe;
        if (guess != IdMap<Value>::kNoSlot) {
          ASSERT_NE(map.AtSlot(guess), nullptr) << "a guess is a live slot: " << probe;
        }
        if (exact_guesses) {
          ASSERT_EQ(guess, it == want.end() ? IdMap<Value>::kNoSlot : slot_of[probe]) << probe;
        } else if (it != want.end()) {
          ASSERT_NE(guess, IdMap<Value>::kNoSlot) << "a held id's guess: " << probe;
        }
        if (it == want.end()) {
          ASSERT_EQ(v, nullptr) << probe << " after " << op << " operations";
        } else {
          ASSERT_NE(v, nullptr) << probe << " after " << op << " operations";
          EXPECT_EQ(v->id, probe);
          EXPECT_EQ(v->payload, it->second);
          EXPECT_EQ(v, where[probe]) << "a value moved: " << probe;
          EXPECT_EQ(map.AtSlot(slot_of[probe]), v) << "the slot of " << probe;
          EXPECT_LT(slot_of[probe], most) << "slots are dense: " << probe;
        }
      }
      std::unordered_map<std::string, int> seen;
      map.ForEach([&](const Value& v) { EXPECT_TRUE(seen.emplace(v.id, v.payload).second); });
      EXPECT_EQ(seen, want) << "ForEach after " << op << " operations";
    }
  }
}

TEST(IdMap, MatchesAnUnorderedMap) {
  for (uint32_t seed = 1; seed <= 3; ++seed) {
    CheckAgainstUnorderedMap<IdMap<Value>>(seed, 3000, 20000, /*exact_guesses=*/true);
  }
}

TEST(IdMap, MatchesAnUnorderedMapWhenHashesCollide) {
  for (uint32_t seed = 1; seed <= 3; ++seed) {
    CheckAgainstUnorderedMap<IdMap<Value, CollidingHash>>(seed, 200, 6000, /*exact_guesses=*/false);
  }
}

TEST(IdMap, MatchesAnUnorderedMapWhenRunsWrapAroundTheTable) {
  for (uint32_t seed = 1; seed <= 3; ++seed) {
    CheckAgainstUnorderedMap<IdMap<Value, WrappingHash>>(seed, 40, 4000, /*exact_guesses=*/false);
  }
}

TEST(IdMap, ValuesStayPutWhileTheTableGrows) {
  IdMap<Value> map;
  const Value* first = map.Emplace(Value{"w0", 7}).first;
  for (int i = 1; i < 20000; ++i) map.Emplace(Value{"w" + std::to_string(i), i});
  EXPECT_EQ(map.Find("w0"), first);
  EXPECT_EQ(first->payload, 7);
  EXPECT_EQ(map.Find("x"), nullptr);
  EXPECT_EQ(map.Find(""), nullptr);
}

TEST(IdMap, AnErasedSlotIsReusedEmpty) {
  IdMap<Value> map;
  Value* a = map.Emplace(Value{"a", 1}).first;
  EXPECT_TRUE(map.Erase("a"));
  EXPECT_FALSE(map.Erase("a"));
  EXPECT_EQ(map.Find("a"), nullptr);
  Value* b = map.Emplace(Value{"b", 2}).first;
  EXPECT_EQ(a, b);  // the freed slot
  EXPECT_EQ(b->id, "b");
  EXPECT_EQ(b->payload, 2);
  EXPECT_EQ(map.size(), 1u);
}

}  // namespace
}  // namespace elastra
