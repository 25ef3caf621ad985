// What the training-metrics example of docs/training.md leaves to the user: a job to report into.
// Linked, not run (it needs a job).
#include <elastra/worker.h>

elastra::Status ReportStep(elastra::Worker& worker, double loss, int64_t replica_batch);

int main() {
  auto options = elastra::WorkerOptions::FromEnvironment();
  if (!options.ok()) return 1;
  auto worker = elastra::Worker::Create(*options);
  if (!worker.ok() || !(*worker)->Start().ok()) return 1;
  return ReportStep(**worker, 0.5, 32).ok() ? 0 : 1;
}
