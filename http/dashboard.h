// The dashboard GET / serves (docs/http.md, "GET /"): http/dashboard.html, compiled into
// the library at build time, so the page needs nothing from the network or the disk. It shows the
// job from GET /v1/job and follows GET /v1/events; its charts are SVG drawn by its own script.
// Thread-safe (constant).
#pragma once

#include <string_view>

namespace elastra::http {

// The whole page (HTML with its style and script inline).
std::string_view DashboardHtml();

// The Content-Security-Policy the page is served with: it may load nothing but from its own
// origin (scripts and styles only inline), so a browser showing it reaches no other host.
inline constexpr char kDashboardCsp[] =
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'";

}  // namespace elastra::http
