// ModelDescription: the model the planner lays out, read from a JSON file (or built by the
// worker API). Plain value type; thread-compatible.
//
// JSON fields (all numbers integers unless said):
//   layers, hidden, heads, vocab, seq_len, global_batch, micro_batch   required, >= 1
//     (upper limits: layers 4096, hidden 2^20, ffn_hidden 2^22, vocab 2^24, seq_len 2^22)
//   ffn_hidden        default 4 * hidden
//   dtype             "fp32" | "fp16" | "bf16" (parameters, gradients and activations; the
//                     planner counts bf16 gradients as fp32, as Megatron and DeepSpeed keep
//                     them), default "bf16"
//   optimizer         "adam" (fp32 master weights and two fp32 moments per parameter), default
//   zero              0 or 1 (1: optimizer state sharded over DP, ZeRO-1), default 0
//   device_memory_gib number > 0, memory of one device
// Unknown fields are refused so that a typo does not silently fall back to a default.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "elastra/status.h"

namespace elastra {

struct ModelDescription {
  int layers = 0;
  int64_t hidden = 0;
  int heads = 0;
  int64_t ffn_hidden = 0;
  int64_t vocab = 0;
  int64_t seq_len = 0;
  int64_t global_batch = 0;
  int64_t micro_batch = 0;
  std::string dtype = "bf16";
  std::string optimizer = "adam";
  int zero = 0;
  double device_memory_gib = 0;

  // Bytes per parameter element for `dtype`.
  size_t dtype_size() const { return dtype == "fp32" ? 4 : 2; }
  // Parameters of the whole model (embeddings, layers, final layer norm).
  int64_t ParameterCount() const;
  // Parameters of one transformer layer.
  int64_t LayerParameterCount() const;
  // Parameters of the embeddings (token + position).
  int64_t EmbeddingParameterCount() const { return (vocab + seq_len) * hidden; }
};

// Parses the JSON text. kInvalidArgument naming the field and what is wrong with it.
StatusOr<ModelDescription> ParseModelDescription(const std::string& json_text);
// The same from parsed JSON (the "model" object of a worker's join, which the coordinator has
// parsed already). Never dumps the value: an error names the field and its JSON type.
StatusOr<ModelDescription> ModelDescriptionFromJson(const nlohmann::json& j);
// Reads and parses a file. kNotFound when it cannot be read, else as ParseModelDescription with
// the path in the message.
StatusOr<ModelDescription> LoadModelDescription(const std::string& path);

}  // namespace elastra
