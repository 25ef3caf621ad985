// Builds against the installed public headers only, and exercises the linked library.
#include <elastra/config.h>
#include <elastra/worker.h>

#include <cstdio>

int main() {
  elastra::TensorCollection state;
  if (!state.AddTensor("w", {4, 4}, elastra::DataType::kFloat32).ok()) return 1;
  state.View<float>("w")[3] = 2.0f;
  // Without ELASTRA_COORDINATOR the options refuse clearly instead of guessing.
  auto options = elastra::WorkerOptions::FromEnvironment();
  if (options.ok() || options.status().code() != elastra::StatusCode::kInvalidArgument) return 1;
  std::printf("consumer ok: %zu bytes, nccl=%d\n", state.bytes(), ELASTRA_HAVE_NCCL);
  return 0;
}
