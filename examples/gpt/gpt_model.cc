// The GPT of train_gpt: see gpt_model.h. The one translation unit of the example that includes
// LibTorch.
#include "examples/gpt/gpt_model.h"

#include <torch/torch.h>

#include <cmath>
#include <map>
#include <vector>

#include "torch_interop/torch_state.h"

namespace gpt {

using elastra::Communicator;
using elastra::DataType;
using elastra::OkStatus;
using elastra::ReduceOp;
using elastra::Status;
using elastra::TensorCollection;
using elastra::torch_interop::GradientReducer;
using elastra::torch_interop::TorchState;

namespace {

// A tensor-parallel collective inside autograd: its communicator and the first error it met (the
// step returns it; later collectives of the step are skipped).
struct TpLink {
  Communicator* comm = nullptr;
  Status error;
  void Allreduce(torch::Tensor& t) {
    if (!error.ok()) return;
    error = comm->Allreduce(t.data_ptr<float>(), static_cast<size_t>(t.numel()), DataType::kFloat32,
                            ReduceOp::kSum);
  }
};

TpLink* LinkOf(torch::autograd::AutogradContext* ctx) {
  return reinterpret_cast<TpLink*>(ctx->saved_data["link"].toInt());
}

// Megatron's f: identity forward, allreduce over tp of the gradient backward (the input of a
// column-parallel layer).
class CopyToTp : public torch::autograd::Function<CopyToTp> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x,
                               int64_t link) {
    ctx->saved_data["link"] = link;
    return x.clone();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    torch::Tensor g = grads[0].contiguous().clone();
    LinkOf(ctx)->Allreduce(g);
    return {g, torch::Tensor()};
  }
};

// Megatron's g: allreduce over tp forward (the partial sums of a row-parallel layer), identity
// backward.
class ReduceFromTp : public torch::autograd::Function<ReduceFromTp> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x,
                               int64_t link) {
    torch::Tensor y = x.contiguous().clone();
    reinterpret_cast<TpLink*>(link)->Allreduce(y);
    return y;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return {grads[0], torch::Tensor()};
  }
};

struct ParamDef {
  std::string name;
  std::vector<int64_t> shape;
  elastra::ShardingRule rule;
  double std = 0;  // normal(0, std); 0 with fill
  float fill = 0;
};

std::vector<ParamDef> Params(const ModelConfig& c) {
  const int64_t h = c.hidden, f = c.ffn, v = 256;
  const double out_std = 0.02 / std::sqrt(2.0 * c.layers);
  std::vector<ParamDef> p;
  p.push_back({"wte", {v, h}, elastra::Replicated(), 0.02});
  p.push_back({"wpe", {c.seq_len, h}, elastra::OwnedByLayer(0), 0.01});
  for (int l = 0; l < c.layers; ++l) {
    const std::string n = "l" + std::to_string(l) + "_";
    p.push_back({n + "ln1_w", {h}, elastra::OwnedByLayer(l), 0, 1.0f});
    p.push_back({n + "ln1_b", {h}, elastra::OwnedByLayer(l), 0, 0.0f});
    p.push_back({n + "qkv_w", {3 * h, h}, elastra::SplitOverTp(0, l), 0.02});
    p.push_back({n + "qkv_b", {3 * h}, elastra::SplitOverTp(0, l), 0, 0.0f});
    p.push_back({n + "proj_w", {h, h}, elastra::SplitOverTp(1, l), out_std});
    p.push_back({n + "proj_b", {h}, elastra::OwnedByLayer(l), 0, 0.0f});
    p.push_back({n + "ln2_w", {h}, elastra::OwnedByLayer(l), 0, 1.0f});
    p.push_back({n + "ln2_b", {h}, elastra::OwnedByLayer(l), 0, 0.0f});
    p.push_back({n + "fc1_w", {f, h}, elastra::SplitOverTp(0, l), 0.02});
    p.push_back({n + "fc1_b", {f}, elastra::SplitOverTp(0, l), 0, 0.0f});
    p.push_back({n + "fc2_w", {h, f}, elastra::SplitOverTp(1, l), out_std});
    p.push_back({n + "fc2_b", {h}, elastra::OwnedByLayer(l), 0, 0.0f});
  }
  p.push_back({"lnf_w", {h}, elastra::OwnedByLayer(c.layers - 1), 0, 1.0f});
  p.push_back({"lnf_b", {h}, elastra::OwnedByLayer(c.layers - 1), 0, 0.0f});
  return p;
}

// The fp32 master weights as a module: AdamW and TorchState::AddModule see its parameters.
struct MasterWeights : torch::nn::Module {
  explicit MasterWeights(const std::vector<ParamDef>& defs) {
    for (const ParamDef& d : defs) {
      torch::Tensor t = d.std > 0 ? torch::randn(d.shape) * d.std : torch::full(d.shape, d.fill);
      register_parameter(d.name, t);
    }
  }
};

}  // namespace

Status CheckLayout(const ModelConfig& c, const elastra::Layout& layout) {
  if (c.heads % layout.tp != 0) {
    return elastra::InvalidArgumentError("tp=" + std::to_string(layout.tp) + " does not divide " +
                                         std::to_string(c.heads) + " heads");
  }
  if (layout.pp > c.layers) {
    return elastra::InvalidArgumentError("pp=" + std::to_string(layout.pp) + " exceeds " +
                                         std::to_string(c.layers) + " layers");
  }
  if (c.global_batch < layout.dp) {
    return elastra::InvalidArgumentError("dp=" + std::to_string(layout.dp) + " exceeds the " +
                                         std::to_string(c.global_batch) + " samples of a batch");
  }
  return OkStatus();
}

class GptTrainer::Impl {
 public:
  Impl(const ModelConfig& c, Corpus* corpus, TensorCollection* state)
      : c_(c), corpus_(corpus), state_(state), defs_(Params(c)) {}

  Status Init() {
    torch::manual_seed(c_.seed);
    master_ = std::make_shared<MasterWeights>(defs_);
    for (const ParamDef& d : defs_) master_of_[d.name] = master_->named_parameters()[d.name];
    torch::optim::AdamWOptions o(c_.lr);
    o.betas({0.9, 0.95}).eps(1e-8).weight_decay(c_.weight_decay);
    adamw_ = std::make_unique<torch::optim::AdamW>(master_->parameters(), o);
    if (state_ == nullptr) {  // plain LibTorch: bf16 weights of our own
      torch::NoGradGuard no_grad;
      for (const ParamDef& d : defs_) half_[d.name] = master_of_[d.name].to(torch::kBFloat16);
      return OkStatus();
    }
    ELASTRA_RETURN_IF_ERROR(state_->SetNumLayers(c_.layers));
    torch_ = std::make_unique<TorchState>(state_);
    {
      torch::NoGradGuard no_grad;
      for (const ParamDef& d : defs_) {
        ELASTRA_RETURN_IF_ERROR(
            torch_->Add(d.name, master_of_[d.name].to(torch::kBFloat16), d.rule));
      }
    }
    std::map<std::string, elastra::ShardingRule> rules;
    for (const ParamDef& d : defs_) rules[d.name] = d.rule;
    ELASTRA_RETURN_IF_ERROR(torch_->AddModule(
        *master_, [&](const std::string& name) { return rules.at(name); }, "master."));
    ELASTRA_RETURN_IF_ERROR(torch_->AddAdamW(*adamw_));
    return state_->AddScalar("cursor", 0);
  }

  Status Bind(int64_t steps) {
    if (torch_ == nullptr) return OkStatus();
    ELASTRA_RETURN_IF_ERROR(torch_->Bind(steps));
    for (const ParamDef& d : defs_) half_[d.name] = torch_->View(d.name);
    return OkStatus();
  }

  int64_t cursor() const { return state_ ? state_->GetScalar("cursor") : plain_cursor_; }

  int64_t parameters() const {
    int64_t n = 0;
    for (const ParamDef& d : defs_) n += d.shape.size() == 2 ? d.shape[0] * d.shape[1] : d.shape[0];
    return n;
  }

  Status Step(const Placement& at, double* loss) {
    ELASTRA_RETURN_IF_ERROR(CheckLayout(c_, at.layout));
    const elastra::Layout& L = at.layout;
    const int stage = at.coords.pp_rank;
    const bool first = stage == 0, last = stage == L.pp - 1;
    const elastra::LayerRange layers = elastra::StageLayers(c_.layers, L.pp, stage);
    link_ = TpLink{at.tp, OkStatus()};
    tp_ = L.tp > 1 ? reinterpret_cast<int64_t>(&link_) : 0;
    heads_ = c_.heads / L.tp;

    // This dp rank's samples, in micro-batches.
    const int64_t c0 = cursor(), B = c_.global_batch, S = c_.seq_len;
    const int64_t begin = c0 + B * at.coords.dp_rank / L.dp;
    const int64_t end = c0 + B * (at.coords.dp_rank + 1) / L.dp;
    const int64_t n = end - begin;
    const int64_t m = std::min<int64_t>(c_.micro_batches, n);
    const double scale = 1.0 / static_cast<double>(B * S);

    std::vector<torch::Tensor> inputs(m), outputs(m);
    double loss_sum = 0;
    for (int64_t k = 0; k < m; ++k) {
      const int64_t mb_begin = begin + n * k / m, mb_end = begin + n * (k + 1) / m;
      const int64_t b = mb_end - mb_begin;
      torch::Tensor x;
      if (first) {
        torch::Tensor tokens = torch::empty({b, S + 1}, torch::kLong);
        for (int64_t i = 0; i < b; ++i)
          corpus_->Sample(mb_begin + i, tokens[i].data_ptr<int64_t>());
        x = torch::embedding(W("wte"), tokens.narrow(1, 0, S)) + W("wpe").unsqueeze(0);
      } else {
        x = torch::empty({b, S, c_.hidden});
        ELASTRA_RETURN_IF_ERROR(at.pp->Recv(x.data_ptr(), x.numel() * 4, stage - 1, Tag(k, 0),
                                            at.pp->default_timeout()));
        x.requires_grad_(true);
        inputs[k] = x;
      }
      for (int l = layers.first; l < layers.last; ++l) x = Block(x, l);
      ELASTRA_RETURN_IF_ERROR(link_.error);
      if (last) {
        torch::Tensor tokens = torch::empty({b, S + 1}, torch::kLong);
        for (int64_t i = 0; i < b; ++i)
          corpus_->Sample(mb_begin + i, tokens[i].data_ptr<int64_t>());
        x = torch::layer_norm(x, {c_.hidden}, W("lnf_w"), W("lnf_b"), 1e-5);
        torch::Tensor logits = torch::matmul(x, W("wte").t());
        torch::Tensor l = torch::nn::functional::cross_entropy(
            logits.reshape({b * S, 256}), tokens.narrow(1, 1, S).reshape({b * S}),
            torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
        loss_sum += l.item<double>();
        outputs[k] = l * scale;
      } else {
        torch::Tensor out = x.detach().contiguous();
        ELASTRA_RETURN_IF_ERROR(at.pp->Send(out.data_ptr(), out.numel() * 4, stage + 1, Tag(k, 0),
                                            at.pp->default_timeout()));
        outputs[k] = x;
      }
    }
    for (int64_t k = m - 1; k >= 0; --k) {
      if (last) {
        outputs[k].backward();
      } else {
        torch::Tensor g = torch::empty_like(outputs[k]);
        ELASTRA_RETURN_IF_ERROR(at.pp->Recv(g.data_ptr(), g.numel() * 4, stage + 1, Tag(k, 1),
                                            at.pp->default_timeout()));
        outputs[k].backward(g);
      }
      ELASTRA_RETURN_IF_ERROR(link_.error);
      if (!first) {
        torch::Tensor g = inputs[k].grad().contiguous();
        ELASTRA_RETURN_IF_ERROR(at.pp->Send(g.data_ptr(), g.numel() * 4, stage - 1, Tag(k, 1),
                                            at.pp->default_timeout()));
      }
    }
    outputs.clear();
    inputs.clear();

    // The tied embedding's two gradients (first stage, last stage) summed over the stages.
    if (L.pp > 1) {
      torch::Tensor& w = master_of_["wte"];
      if (!w.grad().defined()) w.mutable_grad() = torch::zeros_like(w);
      if (!w.grad().is_contiguous()) w.mutable_grad() = w.grad().contiguous();
      ELASTRA_RETURN_IF_ERROR(at.pp->Allreduce(w.grad().data_ptr(), w.grad().numel(),
                                               DataType::kFloat32, ReduceOp::kSum));
    }
    if (L.dp > 1) ELASTRA_RETURN_IF_ERROR(reducer_.Reduce(*at.dp, master_->parameters()));
    // The batch's loss: the last stage's sums (one tp rank each), summed over the world.
    double total = last && at.coords.tp_rank == 0 ? loss_sum : 0.0;
    if (at.world != nullptr && at.world->size() > 1) {
      ELASTRA_RETURN_IF_ERROR(at.world->Allreduce(&total, 1, DataType::kFloat64, ReduceOp::kSum));
    }
    *loss = total * scale;

    adamw_->step();
    {
      torch::NoGradGuard no_grad;
      for (const ParamDef& d : defs_) {
        torch::Tensor& half = half_[d.name];
        if (half.numel() > 0) half.copy_(master_of_[d.name]);  // rounds to nearest-even
      }
    }
    for (auto& p : master_->parameters()) p.mutable_grad() = torch::Tensor();
    if (state_ != nullptr) {
      state_->SetScalar("cursor", c0 + B);
    } else {
      plain_cursor_ = c0 + B;
    }
    return OkStatus();
  }

 private:
  static uint32_t Tag(int64_t micro_batch, int direction) {
    return static_cast<uint32_t>(micro_batch * 2 + direction);
  }

  // The weight `name` as the model computes with it: the bf16 value in float32, its gradient
  // going to the fp32 master weight (straight through the rounding).
  torch::Tensor W(const std::string& name) {
    const torch::Tensor& master = master_of_[name];
    return master + (half_[name].to(torch::kFloat32) - master).detach();
  }

  torch::Tensor F(const torch::Tensor& x) { return tp_ ? CopyToTp::apply(x, tp_) : x; }
  torch::Tensor G(const torch::Tensor& x) { return tp_ ? ReduceFromTp::apply(x, tp_) : x; }

  torch::Tensor Block(torch::Tensor x, int l) {
    const std::string p = "l" + std::to_string(l) + "_";
    const int64_t b = x.size(0), S = x.size(1), hd = c_.hidden / c_.heads;
    torch::Tensor h = torch::layer_norm(x, {c_.hidden}, W(p + "ln1_w"), W(p + "ln1_b"), 1e-5);
    torch::Tensor qkv = torch::linear(F(h), W(p + "qkv_w"), W(p + "qkv_b"));
    qkv = qkv.view({b, S, heads_, 3, hd}).permute({3, 0, 2, 1, 4});  // [3, b, heads, S, hd]
    torch::Tensor q = qkv[0], k = qkv[1], v = qkv[2];
    torch::Tensor att = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(double(hd)));
    if (!mask_.defined() || mask_.size(0) != S) {
      mask_ = torch::ones({S, S}, torch::kBool).triu(1);
    }
    att = torch::softmax(att.masked_fill(mask_, -INFINITY), -1);
    torch::Tensor y = torch::matmul(att, v).permute({0, 2, 1, 3}).reshape({b, S, heads_ * hd});
    x = x + G(torch::linear(y, W(p + "proj_w"))) + W(p + "proj_b");
    h = torch::layer_norm(x, {c_.hidden}, W(p + "ln2_w"), W(p + "ln2_b"), 1e-5);
    torch::Tensor a = torch::gelu(torch::linear(F(h), W(p + "fc1_w"), W(p + "fc1_b")));
    return x + G(torch::linear(a, W(p + "fc2_w"))) + W(p + "fc2_b");
  }

  ModelConfig c_;
  Corpus* corpus_;
  TensorCollection* state_;
  std::vector<ParamDef> defs_;
  std::shared_ptr<MasterWeights> master_;
  std::map<std::string, torch::Tensor> master_of_;
  std::map<std::string, torch::Tensor> half_;
  std::unique_ptr<torch::optim::AdamW> adamw_;
  std::unique_ptr<TorchState> torch_;
  GradientReducer reducer_;
  TpLink link_;
  int64_t tp_ = 0;
  int64_t heads_ = 1;
  int64_t plain_cursor_ = 0;
  torch::Tensor mask_;
};

elastra::StatusOr<std::unique_ptr<GptTrainer>> GptTrainer::Create(const ModelConfig& config,
                                                                  Corpus* corpus,
                                                                  TensorCollection* state) {
  ModelConfig c = config;
  if (c.ffn == 0) c.ffn = 4 * c.hidden;
  if (c.hidden % c.heads != 0) {
    return elastra::InvalidArgumentError("hidden " + std::to_string(c.hidden) +
                                         " is not a multiple of " + std::to_string(c.heads) +
                                         " heads");
  }
  if (corpus->seq_len() != c.seq_len) return elastra::InvalidArgumentError("corpus seq_len");
  torch::set_num_threads(1);  // deterministic, and one core per worker
  auto impl = std::make_unique<Impl>(c, corpus, state);
  ELASTRA_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<GptTrainer>(new GptTrainer(std::move(impl)));
}

GptTrainer::GptTrainer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GptTrainer::~GptTrainer() = default;
Status GptTrainer::Bind(int64_t steps) { return impl_->Bind(steps); }
Status GptTrainer::Step(const Placement& at, double* loss) { return impl_->Step(at, loss); }
int64_t GptTrainer::cursor() const { return impl_->cursor(); }
int64_t GptTrainer::parameters() const { return impl_->parameters(); }

}  // namespace gpt
