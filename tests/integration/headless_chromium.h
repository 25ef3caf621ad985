// A headless Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe: the
// browser reads commands on its fd 3 and writes answers on its fd 4, each a JSON text ended by a
// NUL byte), for tests that load a page and check what it drew. Not thread-safe.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "elastra/status.h"

namespace elastra::testing {

// The chromium binary on PATH ("chromium", then "chromium-browser"); empty when there is none.
std::string FindChromium();

class HeadlessChromium {
 public:
  // Starts `binary` headless with a fresh profile under `profile_dir` and opens one page of
  // width x height CSS pixels. Host names other than 127.0.0.1 and localhost resolve to nothing,
  // so a page that reaches for the network fails visibly. kUnavailable when it does not start.
  static StatusOr<std::unique_ptr<HeadlessChromium>> Launch(const std::string& binary,
                                                            const std::string& profile_dir,
                                                            int width = 1400, int height = 1000);
  ~HeadlessChromium();  // closes the browser and waits for it
  HeadlessChromium(const HeadlessChromium&) = delete;
  HeadlessChromium& operator=(const HeadlessChromium&) = delete;

  // A DevTools command on the page's session (`on_page`) or the browser; its "result".
  // kTimedOut when no answer comes within `timeout`, kInternal with the browser's error.
  StatusOr<nlohmann::json> Call(const std::string& method, nlohmann::json params,
                                bool on_page = true,
                                std::chrono::milliseconds timeout = std::chrono::seconds(30));
  // Loads `url` in the page.
  Status Navigate(const std::string& url);
  // The value of a JavaScript expression in the page (promises awaited).
  StatusOr<nlohmann::json> Evaluate(const std::string& expression);
  // Evaluates `expression` until it is true (re-evaluating after each 100 ms), or `timeout`
  // passes: kTimedOut with `describe`'s value at the end (an expression saying what is shown).
  Status WaitFor(const std::string& expression, std::chrono::milliseconds timeout,
                 const std::string& describe = "document.body.innerText.slice(0, 2000)");
  // The page as a PNG file at `path`.
  Status Screenshot(const std::string& path);

 private:
  HeadlessChromium() = default;
  Status Send(const nlohmann::json& message);
  StatusOr<nlohmann::json> Receive(std::chrono::steady_clock::time_point deadline);

  pid_t pid_ = -1;
  int to_browser_ = -1;
  int from_browser_ = -1;
  std::string buffer_;
  std::string session_;
  int next_id_ = 1;
};

}  // namespace elastra::testing
