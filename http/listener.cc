#include "http/listener.h"

#include <algorithm>

namespace elastra::http {

void Listener::Configure(const ListenerOptions& options) {
  const int threads = std::max(1, options.threads);
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  const auto timeout = options.read_timeout;
  server_->set_read_timeout(timeout.count() / 1000, (timeout.count() % 1000) * 1000);
  server_->set_write_timeout(timeout.count() / 1000, (timeout.count() % 1000) * 1000);
  server_->set_keep_alive_timeout(options.keep_alive_seconds);
  server_->set_payload_max_length(options.max_body_bytes);
}

Status Listener::Start(const std::string& host, int port) {
  port_ = port == 0 ? server_->bind_to_any_port(host)
                    : (server_->bind_to_port(host, port) ? port : -1);
  if (port_ < 0) {
    return UnavailableError("cannot listen for HTTP on " + host + ":" + std::to_string(port));
  }
  url_ = "http://" + host + ":" + std::to_string(port_);
  thread_ = std::thread([this] {
    server_->listen_after_bind();
    returned_ = true;
  });
  while (!server_->is_running() && !returned_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return OkStatus();
}

void Listener::Stop() {
  if (!thread_.joinable()) return;
  server_->stop();
  thread_.join();
}

}  // namespace elastra::http
