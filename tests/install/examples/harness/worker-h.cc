// What the example in <elastra/worker.h> leaves to the user: the model's step, and a main that
// runs the loop. Linked, not run (it needs a job).
#include <elastra/worker.h>

elastra::Status TrainOneStep(elastra::Worker& worker) { return worker.world().Barrier(); }

elastra::Status Train(const elastra::WorkerOptions& options, int64_t steps);

int main() {
  auto options = elastra::WorkerOptions::FromEnvironment();
  if (!options.ok()) return 1;
  return Train(*options, 100).ok() ? 0 : 1;
}
