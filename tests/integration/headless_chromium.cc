#include "tests/integration/headless_chromium.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>
#include <vector>

namespace elastra::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

bool Executable(const std::string& path) { return access(path.c_str(), X_OK) == 0; }

// Decodes standard base64 (the screenshot's data); skips bytes outside the alphabet.
std::string Base64Decode(const std::string& in) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  uint32_t bits = 0;
  int count = 0;
  for (char c : in) {
    const int v = value(c);
    if (v < 0) continue;
    bits = bits << 6 | static_cast<uint32_t>(v);
    count += 6;
    if (count >= 8) {
      count -= 8;
      out += static_cast<char>((bits >> count) & 0xff);
    }
  }
  return out;
}

}  // namespace

std::string FindChromium() {
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  for (const char* name : {"chromium", "chromium-browser"}) {
    size_t pos = 0;
    while (pos <= dirs.size()) {
      size_t end = dirs.find(':', pos);
      if (end == std::string::npos) end = dirs.size();
      const std::string candidate = dirs.substr(pos, end - pos) + "/" + name;
      if (end > pos && Executable(candidate)) return candidate;
      pos = end + 1;
    }
  }
  return "";
}

StatusOr<std::unique_ptr<HeadlessChromium>> HeadlessChromium::Launch(const std::string& binary,
                                                                     const std::string& profile_dir,
                                                                     int width, int height) {
  // A browser that died must surface as an error from write(), not kill the test.
  signal(SIGPIPE, SIG_IGN);
  int commands[2], answers[2];  // [0] read end, [1] write end
  if (pipe2(commands, O_CLOEXEC) != 0 || pipe2(answers, O_CLOEXEC) != 0) {
    return UnavailableError(std::string("pipe: ") + std::strerror(errno));
  }
  std::vector<std::string> args = {
      binary,
      "--headless=new",
      "--no-sandbox",  // tests run as root
      "--disable-gpu",
      "--remote-debugging-pipe",
      "--user-data-dir=" + profile_dir,
      "--no-first-run",
      "--no-default-browser-check",
      "--disable-extensions",
      "--disable-background-networking",
      "--disable-sync",
      "--disable-component-update",
      "--disable-dev-shm-usage",
      "--hide-scrollbars",
      "--mute-audio",
      "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1, EXCLUDE localhost",
      "--window-size=" + std::to_string(width) + "," + std::to_string(height),
      "about:blank"};
  const pid_t pid = fork();
  if (pid < 0) return UnavailableError(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    // The browser reads commands on fd 3 and writes answers on fd 4. Out of the way first (a
    // pipe end may itself be fd 3 or 4), then into place without close-on-exec.
    const int in = fcntl(commands[0], F_DUPFD, 10);
    const int out = fcntl(answers[1], F_DUPFD, 10);
    dup2(in, 3);
    dup2(out, 4);
    fcntl(3, F_SETFD, 0);
    fcntl(4, F_SETFD, 0);
    const int null = open("/dev/null", O_RDWR);
    if (null >= 0) {
      dup2(null, 0);
      if (std::getenv("ELASTRA_TEST_CHROMIUM_LOG") == nullptr) {
        dup2(null, 1);
        dup2(null, 2);
      }
    }
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  close(commands[0]);
  close(answers[1]);
  std::unique_ptr<HeadlessChromium> b(new HeadlessChromium());
  b->pid_ = pid;
  b->to_browser_ = commands[1];
  b->from_browser_ = answers[0];
  auto target = b->Call("Target.createTarget", {{"url", "about:blank"}}, false);
  if (!target.ok()) return target.status().WithContext("starting " + binary);
  auto attached = b->Call("Target.attachToTarget",
                          {{"targetId", (*target)["targetId"]}, {"flatten", true}}, false);
  if (!attached.ok()) return attached.status();
  b->session_ = (*attached)["sessionId"].get<std::string>();
  ELASTRA_RETURN_IF_ERROR(b->Call("Page.enable", json::object()).status());
  ELASTRA_RETURN_IF_ERROR(b->Call("Runtime.enable", json::object()).status());
  ELASTRA_RETURN_IF_ERROR(
      b->Call("Emulation.setDeviceMetricsOverride",
              {{"width", width}, {"height", height}, {"deviceScaleFactor", 1}, {"mobile", false}})
          .status());
  return b;
}

HeadlessChromium::~HeadlessChromium() {
  if (to_browser_ >= 0) {
    (void)Send({{"id", next_id_++}, {"method", "Browser.close"}});
    close(to_browser_);
  }
  if (pid_ > 0) {
    // Browser.close ends it; a browser that does not go within 10 s is killed.
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (Clock::now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // waiting for its exit
    }
  }
  if (from_browser_ >= 0) close(from_browser_);
}

Status HeadlessChromium::Send(const json& message) {
  std::string text = message.dump();
  text.push_back('\0');
  size_t sent = 0;
  while (sent < text.size()) {
    const ssize_t n = write(to_browser_, text.data() + sent, text.size() - sent);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return UnavailableError(std::string("write to chromium: ") + std::strerror(errno));
    sent += static_cast<size_t>(n);
  }
  return OkStatus();
}

StatusOr<json> HeadlessChromium::Receive(Clock::time_point deadline) {
  for (;;) {
    const size_t end = buffer_.find('\0');
    if (end != std::string::npos) {
      json message = json::parse(buffer_.substr(0, end), nullptr, false);
      buffer_.erase(0, end + 1);
      if (!message.is_discarded()) return message;
      continue;
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return TimedOutError("no answer from chromium in time");
    pollfd p{from_browser_, POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(left));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    char chunk[65536];
    const ssize_t n = read(from_browser_, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return UnavailableError("chromium closed its DevTools pipe (did it start?)");
    buffer_.append(chunk, static_cast<size_t>(n));
  }
}

StatusOr<json> HeadlessChromium::Call(const std::string& method, json params, bool on_page,
                                      std::chrono::milliseconds timeout) {
  const int id = next_id_++;
  json message = {{"id", id}, {"method", method}, {"params", std::move(params)}};
  if (on_page) message["sessionId"] = session_;
  ELASTRA_RETURN_IF_ERROR(Send(message));
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    ELASTRA_ASSIGN_OR_RETURN(json answer, Receive(deadline));
    if (!answer.contains("id") || answer["id"] != id) continue;  // an event, or another answer
    if (answer.contains("error")) {
      return InternalError(method + ": " + answer["error"].dump());
    }
    return answer.value("result", json::object());
  }
}

Status HeadlessChromium::Navigate(const std::string& url) {
  ELASTRA_ASSIGN_OR_RETURN(json result, Call("Page.navigate", {{"url", url}}));
  if (result.contains("errorText")) {
    return UnavailableError("loading " + url + ": " + result["errorText"].dump());
  }
  return WaitFor("document.readyState === 'complete'", std::chrono::seconds(30));
}

StatusOr<json> HeadlessChromium::Evaluate(const std::string& expression) {
  ELASTRA_ASSIGN_OR_RETURN(json result, Call("Runtime.evaluate", {{"expression", expression},
                                                                  {"returnByValue", true},
                                                                  {"awaitPromise", true}}));
  if (result.contains("exceptionDetails")) {
    return InternalError("evaluating " + expression + ": " + result["exceptionDetails"].dump());
  }
  return result["result"].value("value", json());
}

Status HeadlessChromium::WaitFor(const std::string& expression, std::chrono::milliseconds timeout,
                                 const std::string& describe) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    auto value = Evaluate("!!(" + expression + ")");
    if (value.ok() && *value == true) return OkStatus();
    if (Clock::now() > deadline) {
      auto shown = Evaluate(describe);
      return TimedOutError("the page never showed " + expression + "; it shows: " +
                           (shown.ok() ? shown->dump() : shown.status().ToString()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // a poll of the page
  }
}

Status HeadlessChromium::Screenshot(const std::string& path) {
  ELASTRA_ASSIGN_OR_RETURN(json shot, Call("Page.captureScreenshot",
                                           {{"format", "png"}, {"captureBeyondViewport", true}}));
  const std::string png = Base64Decode(shot.value("data", ""));
  std::ofstream out(path, std::ios::binary);
  out.write(png.data(), static_cast<std::streamsize>(png.size()));
  if (!out) return InternalError("cannot write " + path);
  return OkStatus();
}

}  // namespace elastra::testing
