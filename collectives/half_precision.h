// Reductions of half types (bfloat16, float16) on backends that have none of their own: widened to
// float32, reduced there, and rounded once at the end, as NCCL's reductions of bf16/fp16 accumulate
// in float32. The Gloo and MPI backends share it.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "elastra/data_type.h"
#include "elastra/status.h"

namespace elastra {

// Widens the `send_count` elements of `send` (a half type), runs `reduce(const float* wide_send,
// float* wide_recv)` (a float32 collective of the caller's), and narrows its `recv_count` results
// into `recv`. In place when send == recv (wide_send is then also wide_recv). `recv` is untouched
// when `reduce` fails.
template <class Reduce>
Status ReduceInFloat32(DataType type, const void* send, size_t send_count, void* recv,
                       size_t recv_count, Reduce&& reduce) {
  const bool in_place = send == recv;
  std::vector<float> wide_send(send_count), wide_recv(in_place ? 0 : recv_count);
  WidenToFloat(type, send, wide_send.data(), send_count);
  float* out = in_place ? wide_send.data() : wide_recv.data();
  ELASTRA_RETURN_IF_ERROR(std::forward<Reduce>(reduce)(wide_send.data(), out));
  NarrowFromFloat(type, out, recv, recv_count);
  return OkStatus();
}

}  // namespace elastra
