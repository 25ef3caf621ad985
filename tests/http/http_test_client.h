// A client of the HTTP API for tests: the tokens a coordinator writes beside its state, the bearer
// header that carries one, and GET /v1/events (Server-Sent Events) read into the events' ids and
// types, in order.
#pragma once

#include <httplib.h>

#include <cstdint>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace elastra::testing {

// The token in the file at `path` (admin.token, read.token: one line); empty when there is none.
inline std::string ReadToken(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// The Authorization header that presents `token`.
inline httplib::Headers Bearer(const std::string& token) {
  return {{"Authorization", "Bearer " + token}};
}

struct SseEvent {
  uint64_t id = 0;
  std::string type;
  std::string data;
  bool operator==(const SseEvent& o) const {
    return id == o.id && type == o.type && data == o.data;
  }
};

// Streams from `client` until `done(events so far)` holds after an event (or the stream or its
// read timeout ends); `last_id` non-empty is sent as Last-Event-ID. `status` gets the HTTP status
// (0 when no answer).
inline std::vector<SseEvent> ReadSseEvents(
    httplib::Client& client, const std::string& token, const std::string& last_id,
    const std::function<bool(const std::vector<SseEvent>&)>& done, int* status = nullptr) {
  std::vector<SseEvent> got;
  std::string buffer;
  httplib::Headers headers = Bearer(token);
  if (!last_id.empty()) headers.emplace("Last-Event-ID", last_id);
  int code = 0;
  client.Get(
      "/v1/events", headers,
      [&](const httplib::Response& r) {
        code = r.status;
        return r.status == 200;
      },
      [&](const char* data, size_t n) {
        buffer.append(data, n);
        size_t end;
        while ((end = buffer.find("\n\n")) != std::string::npos) {
          const std::string block = buffer.substr(0, end);
          buffer.erase(0, end + 2);
          if (block.rfind("id: ", 0) != 0) continue;  // a keepalive comment
          SseEvent e;
          size_t pos = 0;
          while (pos < block.size()) {
            size_t nl = block.find('\n', pos);
            if (nl == std::string::npos) nl = block.size();
            const std::string line = block.substr(pos, nl - pos);
            if (line.rfind("id: ", 0) == 0) e.id = std::stoull(line.substr(4));
            if (line.rfind("event: ", 0) == 0) e.type = line.substr(7);
            if (line.rfind("data: ", 0) == 0) e.data = line.substr(6);
            pos = nl + 1;
          }
          got.push_back(e);
          if (done(got)) return false;
        }
        return true;
      });
  if (status != nullptr) *status = code;
  return got;
}

}  // namespace elastra::testing
