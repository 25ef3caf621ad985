#include "elastra/layout.h"

#include <charconv>
#include <sstream>

namespace elastra {

std::string Layout::ToString() const {
  std::ostringstream os;
  os << "dp=" << dp << ",pp=" << pp << ",tp=" << tp;
  return os.str();
}

bool IsValidLayout(const Layout& layout) {
  if (layout.dp < 1 || layout.pp < 1 || layout.tp < 1) return false;
  // Each factor is at most kMaxWorld once the product so far is: no step overflows int64_t.
  int64_t world = layout.dp;
  for (int degree : {layout.pp, layout.tp}) {
    if (world > kMaxWorld || degree > kMaxWorld) return false;
    world *= degree;
  }
  return world <= kMaxWorld;
}

Coordinates CoordinatesOf(const Layout& layout, int rank) {
  Coordinates c;
  c.rank = rank;
  c.tp_rank = rank % layout.tp;
  c.pp_rank = (rank / layout.tp) % layout.pp;
  c.dp_rank = rank / (layout.tp * layout.pp);
  return c;
}

bool ParseLayout(const std::string& text, Layout* layout) {
  Layout out;
  std::stringstream ss(text);
  std::string item;
  bool any = false;
  while (std::getline(ss, item, ',')) {
    auto eq = item.find('=');
    if (eq == std::string::npos) return false;
    std::string key = item.substr(0, eq);
    std::string value = item.substr(eq + 1);
    int v = 0;
    auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
    if (ec != std::errc() || ptr != value.data() + value.size() || v < 1 || v > 1 << 20) {
      return false;
    }
    if (key == "dp") out.dp = v;
    else if (key == "pp") out.pp = v;
    else if (key == "tp") out.tp = v;
    else return false;
    any = true;
  }
  if (!any) return false;
  *layout = out;
  return true;
}

}  // namespace elastra
