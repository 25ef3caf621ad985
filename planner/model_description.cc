// Parsing of the model description JSON.
#include "planner/model_description.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace elastra {
namespace {

using nlohmann::json;

// A value for an error message: a number, string, boolean or null as JSON, an array or object by
// its type only. dump() recurses once per nesting level, and a worker's join may nest its model
// description deeply enough to overflow the stack.
std::string Describe(const json& v) {
  if (v.is_structured()) return std::string("an ") + v.type_name();
  std::string text = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 64) text = text.substr(0, 61) + "...";
  return text;
}

Status ReadInt(const json& j, const char* key, bool required, int64_t lo, int64_t hi,
               int64_t* out) {
  auto it = j.find(key);
  if (it == j.end()) {
    if (required) return InvalidArgumentError(std::string("missing field '") + key + "'");
    return OkStatus();
  }
  if (!it->is_number_integer()) {
    return InvalidArgumentError(std::string("field '") + key + "' must be an integer, got " +
                                Describe(*it));
  }
  const int64_t v = it->get<int64_t>();
  if (v < lo || v > hi) {
    return InvalidArgumentError(std::string("field '") + key + "' must be between " +
                                std::to_string(lo) + " and " + std::to_string(hi) + ", got " +
                                std::to_string(v));
  }
  *out = v;
  return OkStatus();
}

}  // namespace

int64_t ModelDescription::LayerParameterCount() const {
  const int64_t h = hidden, f = ffn_hidden;
  return (3 * h * h + 3 * h) + (h * h + h) + (f * h + f) + (h * f + h) + 4 * h;
}

int64_t ModelDescription::ParameterCount() const {
  return EmbeddingParameterCount() + layers * LayerParameterCount() + 2 * hidden;
}

StatusOr<ModelDescription> ParseModelDescription(const std::string& json_text) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    return InvalidArgumentError(std::string("model description is not valid JSON: ") + e.what());
  }
  return ModelDescriptionFromJson(j);
}

StatusOr<ModelDescription> ModelDescriptionFromJson(const json& j) {
  if (!j.is_object()) return InvalidArgumentError("model description must be a JSON object");
  static const std::set<std::string> kKnown = {
      "layers",      "hidden",       "heads", "ffn_hidden", "vocab",
      "seq_len",     "global_batch", "micro_batch", "dtype", "optimizer",
      "zero",        "device_memory_gib"};
  for (const auto& [key, value] : j.items()) {
    if (!kKnown.count(key)) return InvalidArgumentError("unknown field '" + key + "'");
  }
  ModelDescription m;
  constexpr int64_t kBig = int64_t{1} << 40;
  int64_t v = 0;
  ELASTRA_RETURN_IF_ERROR(ReadInt(j, "layers", true, 1, 4096, &v));
  m.layers = static_cast<int>(v);
  ELASTRA_RETURN_IF_ERROR(ReadInt(j, "hidden", true, 1, 1 << 20, &m.hidden));
  ELASTRA_RETURN_IF_ERROR(ReadInt(j, "heads", true, 1, 1 << 20, &v));
  m.heads = static_cast<int>(v);
  m.ffn_hidden = std::min<int64_t>(4 * m.hidden, 1 << 22);
  ELASTRA_RETURN_IF_ERROR(ReadInt(j, "ffn_hidden", false, 1, 1 << 22, &m.ffn_hidden));
  ELASTRA_RETURN_IF_ERROR(ReadInt(j, "vocab", true, 1, 1 << 24, &m.vocab));
  ELASTRA_RETURN_IF_ERROR(ReadInt(j, "seq_len", true, 1, 1 << 22, &m.seq_len));
  ELASTRA_RETURN_IF_ERROR(ReadInt(j, "global_batch", true, 1, kBig, &m.global_batch));
  ELASTRA_RETURN_IF_ERROR(ReadInt(j, "micro_batch", true, 1, kBig, &m.micro_batch));
  v = 0;
  ELASTRA_RETURN_IF_ERROR(ReadInt(j, "zero", false, 0, 1, &v));
  m.zero = static_cast<int>(v);
  if (auto it = j.find("dtype"); it != j.end()) {
    if (!it->is_string()) return InvalidArgumentError("field 'dtype' must be a string");
    m.dtype = it->get<std::string>();
    if (m.dtype != "fp32" && m.dtype != "fp16" && m.dtype != "bf16") {
      return InvalidArgumentError("field 'dtype' must be \"fp32\", \"fp16\" or \"bf16\", got \"" +
                                  m.dtype + "\"");
    }
  }
  if (auto it = j.find("optimizer"); it != j.end()) {
    if (!it->is_string() || it->get<std::string>() != "adam") {
      return InvalidArgumentError("field 'optimizer' must be \"adam\", got " + Describe(*it));
    }
  }
  auto mem = j.find("device_memory_gib");
  if (mem == j.end()) return InvalidArgumentError("missing field 'device_memory_gib'");
  if (!mem->is_number() || !(mem->get<double>() > 0) || mem->get<double>() > 1e6) {
    return InvalidArgumentError("field 'device_memory_gib' must be a number > 0, got " +
                                Describe(*mem));
  }
  m.device_memory_gib = mem->get<double>();
  if (m.global_batch % m.micro_batch != 0) {
    return InvalidArgumentError("global_batch (" + std::to_string(m.global_batch) +
                                ") must be a multiple of micro_batch (" +
                                std::to_string(m.micro_batch) + ")");
  }
  if (m.hidden % m.heads != 0) {
    return InvalidArgumentError("hidden (" + std::to_string(m.hidden) +
                                ") must be a multiple of heads (" + std::to_string(m.heads) + ")");
  }
  return m;
}

StatusOr<ModelDescription> LoadModelDescription(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFoundError("cannot read model description '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  auto m = ParseModelDescription(ss.str());
  if (!m.ok()) return m.status().WithContext(path);
  return m;
}

}  // namespace elastra
