#include "elastra/tensor_collection.h"

#include "common/logging.h"

namespace elastra {
namespace {

constexpr uint64_t kMaxTensorBytes = uint64_t{1} << 40;

uint64_t Mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h;
}

uint64_t HashString(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

}  // namespace

Status TensorCollection::AddTensor(const std::string& name, std::vector<int64_t> shape,
                                   DataType dtype, ShardingRule rule) {
  if (name.empty()) return InvalidArgumentError("tensor name is empty");
  if (index_.count(name) > 0) return InvalidArgumentError("tensor '" + name + "' already exists");
  if (shape.empty() || shape.size() > 2) {
    return InvalidArgumentError("tensor '" + name + "' must have 1 or 2 dimensions");
  }
  uint64_t bytes = DataTypeSize(dtype);
  for (int64_t d : shape) {
    if (d < 1) return InvalidArgumentError("tensor '" + name + "' has a dimension below 1");
    if (bytes > kMaxTensorBytes / static_cast<uint64_t>(d)) {
      return InvalidArgumentError("tensor '" + name + "' is larger than 2^40 bytes");
    }
    bytes *= static_cast<uint64_t>(d);
  }
  Tensor t;
  t.spec.name = name;
  t.spec.shape = std::move(shape);
  t.spec.element_size = DataTypeSize(dtype);
  t.spec.rule = rule;
  t.dtype = dtype;
  // Held whole until Start(): validate against the trivial layout.
  ELASTRA_RETURN_IF_ERROR(ValidateTensor(t.spec, num_layers_, Layout{}));
  t.region = LocalRegion(t.spec, num_layers_, Layout{}, Coordinates{});
  t.data.assign(bytes, 0);
  index_[name] = tensors_.size();
  tensors_.push_back(std::move(t));
  return OkStatus();
}

Status TensorCollection::SetNumLayers(int layers) {
  if (layers < 1) return InvalidArgumentError("the number of layers must be at least 1");
  for (const auto& t : tensors_) {
    if (t.spec.rule.layer >= layers) {
      return InvalidArgumentError("tensor '" + t.name() + "' belongs to layer " +
                                  std::to_string(t.spec.rule.layer));
    }
  }
  num_layers_ = layers;
  return OkStatus();
}

Status TensorCollection::AddScalar(const std::string& name, int64_t value) {
  for (const auto& [n, v] : scalars_) {
    if (n == name) return InvalidArgumentError("scalar '" + name + "' already exists");
  }
  scalars_.emplace_back(name, value);
  return OkStatus();
}

int64_t TensorCollection::GetScalar(const std::string& name) const {
  for (const auto& [n, v] : scalars_) {
    if (n == name) return v;
  }
  LOG(FATAL) << "unknown scalar '" << name << "'";
  return 0;
}

void TensorCollection::SetScalar(const std::string& name, int64_t value) {
  for (auto& [n, v] : scalars_) {
    if (n == name) {
      v = value;
      return;
    }
  }
  LOG(FATAL) << "unknown scalar '" << name << "'";
}

StateSpec TensorCollection::Spec() const {
  StateSpec spec;
  spec.num_layers = num_layers_;
  for (const auto& t : tensors_) spec.tensors.push_back(t.spec);
  return spec;
}

size_t TensorCollection::bytes() const {
  size_t total = 0;
  for (const auto& t : tensors_) total += t.bytes();
  return total;
}

uint64_t TensorCollection::Signature() const {
  uint64_t h = static_cast<uint64_t>(num_layers_);
  for (const auto& t : tensors_) {
    h = Mix(h, HashString(t.name()));
    h = Mix(h, static_cast<uint64_t>(t.dtype));
    h = Mix(h, static_cast<uint64_t>(t.spec.rule.tp_split_dim + 1));
    h = Mix(h, static_cast<uint64_t>(t.spec.rule.layer + 1));
    h = Mix(h, static_cast<uint64_t>(t.spec.rule.zero));
    for (int64_t d : t.spec.shape) h = Mix(h, static_cast<uint64_t>(d));
  }
  for (const auto& [n, v] : scalars_) h = Mix(h, HashString(n));
  return h;
}

TensorCollection::Tensor& TensorCollection::tensor(const std::string& name) {
  auto it = index_.find(name);
  CHECK(it != index_.end()) << "unknown tensor '" << name << "'";
  return tensors_[it->second];
}

void TensorCollection::CheckType(const Tensor& t, size_t element_size) const {
  CHECK_EQ(DataTypeSize(t.dtype), element_size) << "tensor '" << t.name() << "' is "
                                                 << DataTypeName(t.dtype);
}

}  // namespace elastra
