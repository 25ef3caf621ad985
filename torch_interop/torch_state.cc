// elastra::torch: see torch_state.h.
#include "torch_interop/torch_state.h"

#include <cstring>

namespace elastra::torch_interop {

StatusOr<DataType> ToDataType(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Float:
      return DataType::kFloat32;
    case c10::ScalarType::Double:
      return DataType::kFloat64;
    case c10::ScalarType::BFloat16:
      return DataType::kBFloat16;
    case c10::ScalarType::Half:
      return DataType::kFloat16;
    case c10::ScalarType::Long:
      return DataType::kInt64;
    case c10::ScalarType::Int:
      return DataType::kInt32;
    case c10::ScalarType::Byte:
      return DataType::kUint8;
    default:
      break;
  }
  return InvalidArgumentError(std::string("no Elastra type for torch dtype ") +
                              c10::toString(type));
}

c10::ScalarType ToScalarType(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return c10::ScalarType::Float;
    case DataType::kFloat64:
      return c10::ScalarType::Double;
    case DataType::kBFloat16:
      return c10::ScalarType::BFloat16;
    case DataType::kFloat16:
      return c10::ScalarType::Half;
    case DataType::kInt64:
      return c10::ScalarType::Long;
    case DataType::kInt32:
      return c10::ScalarType::Int;
    case DataType::kUint8:
      return c10::ScalarType::Byte;
  }
  TORCH_CHECK(false, "unknown elastra::DataType ", static_cast<int>(type));
}

Status TorchState::Add(const std::string& name, const torch::Tensor& global, ShardingRule rule) {
  if (rule.zero) {
    return InvalidArgumentError("tensor '" + name + "': ZeRO rules have no torch view");
  }
  if (!global.defined() || !global.device().is_cpu()) {
    return InvalidArgumentError("tensor '" + name + "' must be a defined CPU tensor");
  }
  ELASTRA_ASSIGN_OR_RETURN(DataType type, ToDataType(global.scalar_type()));
  std::vector<int64_t> shape(global.sizes().begin(), global.sizes().end());
  ELASTRA_RETURN_IF_ERROR(state_->AddTensor(name, shape, type, rule));
  // Held whole until Start(): the values go in as they are.
  const torch::Tensor values = global.detach().contiguous();
  auto& t = state_->tensor(name);
  std::memcpy(t.data.data(), values.data_ptr(), t.data.size());
  return OkStatus();
}

Status TorchState::AddModule(torch::nn::Module& module,
                             const std::function<ShardingRule(const std::string&)>& rule_of,
                             const std::string& prefix) {
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    const std::string name = prefix + item.key();
    ELASTRA_RETURN_IF_ERROR(Add(name, item.value(), rule_of(item.key())));
    params_.emplace_back(name, item.value());
  }
  return OkStatus();
}

Status TorchState::AddAdamW(torch::optim::AdamW& optimizer) {
  std::vector<Moments> moments;
  for (const auto& group : optimizer.param_groups()) {
    for (const torch::Tensor& p : group.params()) {
      const std::string* name = nullptr;
      for (const auto& [n, q] : params_) {
        if (q.unsafeGetTensorImpl() == p.unsafeGetTensorImpl()) name = &n;
      }
      if (name == nullptr) {
        return InvalidArgumentError("an optimizer parameter was not registered with AddModule");
      }
      const auto& t = state_->tensor(*name);
      std::vector<int64_t> shape = t.spec.shape;
      const auto zeros = torch::zeros(shape, torch::dtype(ToScalarType(t.dtype)));
      ELASTRA_RETURN_IF_ERROR(Add(*name + ".exp_avg", zeros, t.spec.rule));
      ELASTRA_RETURN_IF_ERROR(Add(*name + ".exp_avg_sq", zeros, t.spec.rule));
      moments.push_back({p, *name});
    }
  }
  adamw_ = &optimizer;
  moments_ = std::move(moments);
  return OkStatus();
}

torch::Tensor TorchState::View(const std::string& name) {
  auto& t = state_->tensor(name);
  TORCH_CHECK(!t.on_device, "tensor '", name, "' is on a device: TorchState binds host shards");
  const auto type = torch::dtype(ToScalarType(t.dtype));
  if (t.region.empty() || t.data.empty()) return torch::empty({0}, type);
  const Rect& box = t.region.box;
  std::vector<int64_t> shape;
  if (t.spec.shape.size() == 2) shape.push_back(box.row_end - box.row_begin);
  shape.push_back(box.col_end - box.col_begin);
  // No deleter: the collection owns the memory; the view lives until the next Bind().
  return torch::from_blob(t.data.data(), shape, type);
}

Status TorchState::Bind(int64_t optimizer_steps) {
  for (const auto& t : state_->tensors()) {
    if (t.on_device) {
      return FailedPreconditionError("tensor '" + t.name() +
                                     "' is on a device: TorchState binds host shards");
    }
  }
  {
    torch::NoGradGuard no_grad;
    for (auto& [name, p] : params_) {
      p.set_data(View(name));
      p.mutable_grad() = torch::Tensor();  // its shape may have changed
    }
  }
  if (adamw_ != nullptr) {
    auto& states = adamw_->state();
    for (const Moments& m : moments_) {
      auto s = std::make_unique<torch::optim::AdamWParamState>();
      s->step(optimizer_steps);
      s->exp_avg(View(m.name + ".exp_avg"));
      s->exp_avg_sq(View(m.name + ".exp_avg_sq"));
      states[c10::guts::to_string(m.param.unsafeGetTensorImpl())] = std::move(s);
    }
  }
  return OkStatus();
}

Status GradientReducer::Reduce(Communicator& comm, const std::vector<torch::Tensor>& params,
                               double scale) {
  buckets_ = 0;
  std::vector<torch::Tensor> grads;
  for (auto it = params.rbegin(); it != params.rend(); ++it) {
    const torch::Tensor& g = it->grad();
    if (g.defined() && g.numel() > 0) grads.push_back(g);
  }
  size_t i = 0;
  while (i < grads.size()) {
    // One bucket: consecutive gradients of one type up to bucket_bytes (at least one).
    const auto type = grads[i].scalar_type();
    ELASTRA_ASSIGN_OR_RETURN(DataType dtype, ToDataType(type));
    const size_t elem = DataTypeSize(dtype);
    size_t end = i, elements = 0;
    while (end < grads.size() && grads[end].scalar_type() == type &&
           (end == i || (elements + grads[end].numel()) * elem <= options_.bucket_bytes)) {
      elements += static_cast<size_t>(grads[end].numel());
      ++end;
    }
    flat_.resize(elements * elem);
    const torch::Tensor flat =
        torch::from_blob(flat_.data(), {static_cast<int64_t>(elements)}, torch::dtype(type));
    int64_t offset = 0;
    for (size_t k = i; k < end; ++k) {
      flat.narrow(0, offset, grads[k].numel()).copy_(grads[k].reshape(-1));
      offset += grads[k].numel();
    }
    ELASTRA_RETURN_IF_ERROR(comm.Allreduce(flat_.data(), elements, dtype, ReduceOp::kSum));
    if (scale != 1.0) flat.mul_(scale);
    offset = 0;
    for (size_t k = i; k < end; ++k) {
      grads[k].copy_(flat.narrow(0, offset, grads[k].numel()).view(grads[k].sizes()));
      offset += grads[k].numel();
    }
    ++buckets_;
    i = end;
  }
  return OkStatus();
}

}  // namespace elastra::torch_interop
