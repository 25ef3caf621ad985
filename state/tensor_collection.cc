#include "elastra/tensor_collection.h"

#include <cstring>

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
  if (bytes == 0) {
    return InvalidArgumentError("tensor '" + name + "' has an unknown dtype " +
                                std::to_string(static_cast<int>(dtype)));
  }
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

Status TensorCollection::SetDevice(int device) {
  for (const auto& t : tensors_) {
    if (t.on_device) {
      return FailedPreconditionError("SetDevice after the shards moved to device " +
                                     std::to_string(device_) + ": call it before Start()");
    }
  }
  if (device >= 0) {
    const int count = CudaDeviceCount();
    if (count == 0) {
      // Allocate() says why: no CUDA in this build, or no device for this process.
      auto probe = DeviceBuffer::Allocate(device, 0);
      return probe.ok() ? UnavailableError("no CUDA device") : probe.status();
    }
    if (device >= count) {
      return UnavailableError("CUDA device " + std::to_string(device) + " does not exist (" +
                              std::to_string(count) + " visible)");
    }
  }
  device_ = device < 0 ? -1 : device;
  return OkStatus();
}

Status TensorCollection::MoveToDevice() {
  if (device_ < 0) return OkStatus();
  for (auto& t : tensors_) {
    if (t.on_device) continue;
    ELASTRA_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Allocate(device_, t.data.size()));
    ELASTRA_RETURN_IF_ERROR(b.CopyFromHost(t.data.data(), t.data.size()));
    t.device_data = std::move(b);
    t.on_device = true;
    HostBytes().swap(t.data);  // give the host memory back
  }
  return OkStatus();
}

Status TensorCollection::MoveToHost(bool keep_values) {
  for (auto& t : tensors_) {
    if (!t.on_device) continue;
    HostBytes host(t.device_data.size(), 0);
    if (keep_values) ELASTRA_RETURN_IF_ERROR(t.device_data.CopyToHost(host.data(), host.size()));
    t.data = std::move(host);
    t.device_data.Reset();
    t.on_device = false;
  }
  return OkStatus();
}

Status TensorCollection::CopyToHost(const Tensor& t, void* dst) const {
  if (t.on_device) return t.device_data.CopyToHost(dst, t.device_data.size());
  if (!t.data.empty()) std::memcpy(dst, t.data.data(), t.data.size());
  return OkStatus();
}

void TensorCollection::ReleaseShards() {
  for (auto& t : tensors_) {
    HostBytes().swap(t.data);
    t.device_data.Reset();
    t.on_device = false;
    t.region = Region{};
  }
}

void TensorCollection::CheckOnHost(const Tensor& t) const {
  CHECK(!t.on_device) << "tensor '" << t.name() << "' is on CUDA device " << device_
                      << ": use DeviceView()";
}

void TensorCollection::CheckOnDevice(const Tensor& t) const {
  CHECK(t.on_device) << "tensor '" << t.name() << "' is in host memory: use View()";
}

void TensorCollection::CheckType(const Tensor& t, size_t element_size) const {
  CHECK_EQ(DataTypeSize(t.dtype), element_size) << "tensor '" << t.name() << "' is "
                                                 << DataTypeName(t.dtype);
}

}  // namespace elastra
