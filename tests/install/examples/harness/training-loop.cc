// What README.md's training-loop example leaves to the user: the model's step.
#include <elastra/worker.h>

elastra::Status TrainStep(elastra::Worker& worker) { return worker.world().Barrier(); }
