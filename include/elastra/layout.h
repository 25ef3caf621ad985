// Layout: how the workers in use are arranged over data, pipeline and tensor parallelism.
// Plain value types; thread-compatible.
#pragma once

#include <cstdint>
#include <string>

namespace elastra {

struct Layout {
  int dp = 1;  // data-parallel replicas
  int pp = 1;  // pipeline stages
  int tp = 1;  // tensor-parallel ranks per stage

  int world() const { return dp * pp * tp; }
  bool operator==(const Layout&) const = default;
  std::string ToString() const;  // "dp=2,pp=1,tp=2"

  template <class Archive>
  void serialize(Archive& ar) {
    ar(dp, pp, tp);
  }
};

// A worker's place in a layout. Global rank order puts TP innermost, then PP, then DP
// (Megatron's order): rank = (dp_rank * pp + pp_rank) * tp + tp_rank.
struct Coordinates {
  int rank = 0;
  int dp_rank = 0;
  int pp_rank = 0;
  int tp_rank = 0;

  bool operator==(const Coordinates&) const = default;

  template <class Archive>
  void serialize(Archive& ar) {
    ar(rank, dp_rank, pp_rank, tp_rank);
  }
};

// The most ranks a layout may have: a degree or a world above it is bad input.
inline constexpr int kMaxWorld = 1 << 20;

// True when every degree is at least 1 and dp x pp x tp is at most kMaxWorld. A layout read from
// outside the process (a frame, the journal) is checked with it before its world() is computed,
// which would overflow for degrees such as 65536 x 65536.
bool IsValidLayout(const Layout& layout);

// The coordinates of global rank `rank` in `layout`.
Coordinates CoordinatesOf(const Layout& layout, int rank);

// Parses "dp=2,pp=1,tp=2" (any order, missing entries default to 1). Returns false on bad input.
bool ParseLayout(const std::string& text, Layout* layout);

}  // namespace elastra
