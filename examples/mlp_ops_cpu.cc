// CpuOps: train_mlp's arithmetic as plain loops over host memory. The loops add the terms of every
// sum in the order train_mlp always did (bias first, then the inner dimension in ascending order;
// gradients row by row), so its losses do not change with the refactoring to MlpOps.
#include <cmath>
#include <cstring>
#include <memory>

#include "examples/mlp_ops.h"

namespace elastra::examples {
namespace {

class CpuOps : public MlpOps {
 public:
  bool on_device() const override { return false; }

  void CopyFromHost(const double* src, Span dst) override {
    if (!dst.empty()) std::memcpy(dst.data, src, dst.size * sizeof(double));
  }
  void CopyToHost(Span src, double* dst) override {
    if (!src.empty()) std::memcpy(dst, src.data, src.size * sizeof(double));
  }
  void Synchronize() override {}

  void Linear(Span x, Span w, Span b, int64_t rows, int in, int out, Span y) override {
    for (int64_t r = 0; r < rows; ++r) {
      for (int o = 0; o < out; ++o) {
        double s = b.empty() ? 0.0 : b.data[o];
        for (int i = 0; i < in; ++i) s += w.data[o * in + i] * x.data[r * in + i];
        y.data[r * out + o] = s;
      }
    }
  }

  void LinearBackward(Span dy, Span x, Span w, int64_t rows, int in, int out, Span dx, Span gw,
                      Span gb) override {
    if (!dx.empty()) std::memset(dx.data, 0, dx.size * sizeof(double));
    for (int64_t r = 0; r < rows; ++r) {
      for (int o = 0; o < out; ++o) {
        double d = dy.data[r * out + o];
        if (!gb.empty()) gb.data[o] += d;
        for (int i = 0; i < in; ++i) {
          gw.data[o * in + i] += d * x.data[r * in + i];
          if (!dx.empty()) dx.data[r * in + i] += d * w.data[o * in + i];
        }
      }
    }
  }

  void Tanh(Span x) override {
    for (size_t k = 0; k < x.size; ++k) x.data[k] = std::tanh(x.data[k]);
  }

  void TanhBackward(Span y, Span grad) override {
    for (size_t k = 0; k < grad.size; ++k) grad.data[k] *= 1.0 - y.data[k] * y.data[k];
  }

  void AddResidual(Span x, Span b, int64_t rows, int cols, Span y) override {
    for (int64_t r = 0; r < rows; ++r) {
      for (int c = 0; c < cols; ++c)
        y.data[r * cols + c] = x.data[r * cols + c] + (y.data[r * cols + c] + b.data[c]);
    }
  }

  void Add(Span x, Span y) override {
    for (size_t k = 0; k < y.size; ++k) y.data[k] += x.data[k];
  }

  void SquaredError(Span target, Span out, Span loss) override {
    for (size_t k = 0; k < out.size; ++k) {
      double d = out.data[k] - target.data[k];
      out.data[k] = d;
      loss.data[0] += 0.5 * d * d;
    }
  }

  void Divide(Span x, double divisor) override {
    for (size_t k = 0; k < x.size; ++k) x.data[k] /= divisor;
  }

  void Adam(Span g, const AdamStep& s, Span p, Span m, Span v) override {
    for (size_t k = 0; k < p.size; ++k) {
      m.data[k] = s.b1 * m.data[k] + (1 - s.b1) * g.data[k];
      v.data[k] = s.b2 * v.data[k] + (1 - s.b2) * g.data[k] * g.data[k];
      p.data[k] -= s.lr * (m.data[k] / s.c1) / (std::sqrt(v.data[k] / s.c2) + s.eps);
    }
  }

 protected:
  double* AllocateRaw(size_t n) override { return new double[n](); }
  void Free(double* p) override { delete[] p; }
};

}  // namespace

std::unique_ptr<MlpOps> MakeCpuOps() { return std::make_unique<CpuOps>(); }

}  // namespace elastra::examples
