// What bench_scale prints: the table of events by size, where the coordinator's CPU went, the
// costs whose growth in N is fitted, and the units. Not thread-safe (printf).
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "bench/scale/scenario.h"

namespace elastra::scale {

// "12.3 MB"-style byte counts and "16.4k"-style counts.
std::string Bytes(double b);
std::string Count(double c);

// The least-squares slope of log(y) over log(x); NaN with fewer than two usable points.
double Exponent(const std::vector<std::pair<double, double>>& points);

// One cost of one event over the sizes run.
struct Series {
  std::string name;
  std::function<double(const ScaleRun&)> value;
};
// Every cost whose growth exponent the bench reports.
std::vector<Series> AllSeries();

// A lower bound of the event's time had every rank run the rendezvous: the coordinator is one
// thread, so the CPU of the requests the sample did not send comes on top.
double TimeWithRendezvous(const EventResult& e);

// The table of every event at every size, with its legend.
void PrintTable(const std::vector<ScaleRun>& runs);
// The 3-D scenario's changes at every size (scenario_3d.h): layout, communicators built and kept,
// standbys, times, the coordinator's CPU and bytes; with its legend.
void PrintChanges(const std::vector<ScaleRun>& runs);
// The handlers that took the most of each event's CPU in `run`.
void PrintHot(const ScaleRun& run);

}  // namespace elastra::scale
