// Region math of include/elastra/sharding.h.
#include "elastra/sharding.h"

#include <algorithm>

namespace elastra {

int64_t StateSpec::TotalBytes() const {
  int64_t total = 0;
  for (const auto& t : tensors) total += FullRect(t.shape).volume() * static_cast<int64_t>(t.element_size);
  return total;
}

Rect Intersect(const Rect& a, const Rect& b) {
  Rect r{std::max(a.row_begin, b.row_begin), std::min(a.row_end, b.row_end),
         std::max(a.col_begin, b.col_begin), std::min(a.col_end, b.col_end)};
  if (r.empty()) return Rect{};
  return r;
}

std::vector<Rect> Subtract(const Rect& a, const Rect& b) {
  const Rect i = Intersect(a, b);
  if (i.empty()) return a.empty() ? std::vector<Rect>{} : std::vector<Rect>{a};
  std::vector<Rect> out;
  auto add = [&](const Rect& r) {
    if (!r.empty()) out.push_back(r);
  };
  add({a.row_begin, i.row_begin, a.col_begin, a.col_end});
  add({i.row_end, a.row_end, a.col_begin, a.col_end});
  add({i.row_begin, i.row_end, a.col_begin, i.col_begin});
  add({i.row_begin, i.row_end, i.col_end, a.col_end});
  return out;
}

std::vector<Rect> Region::Pieces() const {
  std::vector<Rect> out;
  if (empty()) return out;
  const int64_t w = box.col_end - box.col_begin;
  const int64_t ra = flat_begin / w, ca = flat_begin % w;
  const int64_t rb = (flat_end - 1) / w, cb = (flat_end - 1) % w + 1;
  auto add = [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    Rect r{box.row_begin + r0, box.row_begin + r1, box.col_begin + c0, box.col_begin + c1};
    if (!r.empty()) out.push_back(r);
  };
  if (ra == rb) {
    add(ra, ra + 1, ca, cb);
    return out;
  }
  const int64_t mid_begin = ca > 0 ? ra + 1 : ra;
  const int64_t mid_end = cb < w ? rb : rb + 1;
  if (ca > 0) add(ra, ra + 1, ca, w);
  add(mid_begin, mid_end, 0, w);
  if (cb < w) add(rb, rb + 1, 0, cb);
  return out;
}

Rect FullRect(const std::vector<int64_t>& shape) {
  if (shape.size() == 1) return Rect{0, 1, 0, shape[0]};
  if (shape.size() == 2) return Rect{0, shape[0], 0, shape[1]};
  return Rect{};
}

Region LocalRegion(const TensorSpec& t, int num_layers, const Layout& layout,
                   const Coordinates& c) {
  Region region;
  if (t.rule.layer >= 0 && StageOfLayer(num_layers, layout.pp, t.rule.layer) != c.pp_rank) {
    return region;  // another stage owns it
  }
  Rect box = FullRect(t.shape);
  if (t.rule.tp_split_dim >= 0) {
    // In the matrix view a 1-D tensor's dimension 0 is the columns.
    const bool cols = t.shape.size() == 1 || t.rule.tp_split_dim == 1;
    const int64_t n = cols ? box.col_end : box.row_end;
    const int64_t begin = c.tp_rank * n / layout.tp, end = (c.tp_rank + 1) * n / layout.tp;
    if (cols) {
      box.col_begin = begin;
      box.col_end = end;
    } else {
      box.row_begin = begin;
      box.row_end = end;
    }
  }
  region.box = box;
  const int64_t n = box.volume();
  if (t.rule.zero) {
    region.flat_begin = c.dp_rank * n / layout.dp;
    region.flat_end = (c.dp_rank + 1) * n / layout.dp;
  } else {
    region.flat_begin = 0;
    region.flat_end = n;
  }
  return region;
}

StateSpec GptState(const GptConfig& g) {
  StateSpec s;
  s.num_layers = g.layers;
  const int64_t h = g.hidden, f = g.ffn_hidden;
  auto param = [&](std::string name, std::vector<int64_t> shape, int split, int layer) {
    TensorSpec p{name, shape, g.param_size, ShardingRule{split, layer, false}};
    s.tensors.push_back(p);
    if (!g.adam) return;
    for (const char* suffix : {".master", ".exp_avg", ".exp_avg_sq"}) {
      s.tensors.push_back(
          TensorSpec{name + suffix, shape, 4, ShardingRule{split, layer, g.zero}});
    }
  };
  param("embed.word", {g.vocab, h}, 0, 0);
  param("embed.pos", {g.seq_len, h}, -1, 0);
  for (int l = 0; l < g.layers; ++l) {
    const std::string p = "layer" + std::to_string(l) + ".";
    param(p + "ln1.weight", {h}, -1, l);
    param(p + "ln1.bias", {h}, -1, l);
    param(p + "attn.qkv.weight", {3 * h, h}, 0, l);
    param(p + "attn.qkv.bias", {3 * h}, 0, l);
    param(p + "attn.proj.weight", {h, h}, 1, l);
    param(p + "attn.proj.bias", {h}, -1, l);
    param(p + "ln2.weight", {h}, -1, l);
    param(p + "ln2.bias", {h}, -1, l);
    param(p + "mlp.fc1.weight", {f, h}, 0, l);
    param(p + "mlp.fc1.bias", {f}, 0, l);
    param(p + "mlp.fc2.weight", {h, f}, 1, l);
    param(p + "mlp.fc2.bias", {h}, -1, l);
  }
  param("final_ln.weight", {h}, -1, g.layers - 1);
  param("final_ln.bias", {h}, -1, g.layers - 1);
  return s;
}

}  // namespace elastra
