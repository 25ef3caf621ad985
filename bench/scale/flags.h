// bench_scale's flags (bench_scale.cc's header lists them) and what those left out mean.
#pragma once

#include <string>
#include <vector>

#include "bench/scale/scenario.h"

namespace elastra::scale {

struct Flags {
  int max_workers = 16384;
  std::vector<int> sizes;
  bool quick = false;
  double budget_s = 270;
  bool curve = true;
  int repeat = 5;  // runs of each size; each event counts with its median run (MedianOf)
  bool repeat_set = false;
  bool three_d = false;  // --scenario 3d
  std::string journal_dir;
  ScaleParams params;
};

// Prints the usage line to stderr; returns the exit status 2.
int Usage();
// Reads the flags into `f`; false on a flag it does not know or a bad value.
bool ParseFlags(int argc, char** argv, Flags* f);
// What --quick and the flags left out mean: the sizes, the journal's directory. False when a size
// does not fit the scenario (the 3-D job's are multiples of pp x tp).
bool ApplyDefaults(Flags* f);

}  // namespace elastra::scale
