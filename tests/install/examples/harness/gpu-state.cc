// What docs/training.md's gpu-state example leaves to the user: the kernels, and a main. Linked, not run
// (it needs a job and a GPU).
#include <elastra/worker.h>

void Backward(const float* w, float* grad, size_t n) {
  for (size_t i = 0; i < n; ++i) grad[i] = w[i];
}

int main() { return 0; }
