#include "bench/scale/curve_probe.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#if ELASTRA_SCALE_HAVE_SODIUM
#include <sodium.h>
#endif

namespace elastra::scale {
namespace {

double ProcessCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return s(u.ru_utime) + s(u.ru_stime);
}

bool WriteAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = write(fd, p, n);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool ReadAll(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// The clients: `clients` DEALERs that say hello, wait for the go, send `per_client` messages each,
// and leave when told. Runs in the child process.
[[noreturn]] void RunClients(int from_parent, bool curve, const char* server_public, size_t bytes,
                             int clients, int per_client) {
  uint32_t len = 0;
  char endpoint[256] = {0};
  if (!ReadAll(from_parent, &len, sizeof(len)) || len >= sizeof(endpoint) ||
      !ReadAll(from_parent, endpoint, len)) {
    _exit(1);
  }
  void* ctx = zmq_ctx_new();
  std::vector<void*> sockets;
  for (int c = 0; c < clients; ++c) {
    void* s = zmq_socket(ctx, ZMQ_DEALER);
    const int unlimited = 0;
    zmq_setsockopt(s, ZMQ_SNDHWM, &unlimited, sizeof(unlimited));
    if (curve) {
      char pub[41], sec[41];
      zmq_curve_keypair(pub, sec);
      zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, server_public, 40);
      zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, pub, 40);
      zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, sec, 40);
    }
    zmq_connect(s, endpoint);
    zmq_send(s, "hello", 5, 0);
    sockets.push_back(s);
  }
  char go = 0;
  if (!ReadAll(from_parent, &go, 1)) _exit(1);
  const std::string message(bytes, 'x');
  for (int i = 0; i < per_client; ++i) {
    for (void* s : sockets) zmq_send(s, message.data(), message.size(), 0);
  }
  ReadAll(from_parent, &go, 1);  // the parent has them all
  for (void* s : sockets) {
    const int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
    zmq_close(s);
  }
  zmq_ctx_term(ctx);
  _exit(0);
}

// Receives one ROUTER message (identity and data). False on timeout.
bool ReceiveOne(void* router, zmq_msg_t* frame) {
  for (int part = 0; part < 2; ++part) {
    if (zmq_msg_recv(frame, router, 0) < 0) return false;
  }
  return true;
}

// The receiving process's CPU microseconds per message; -1 (and `error`) on failure.
double RouterReceiveCost(bool curve, size_t bytes, int clients, int per_client, std::string* error) {
  char server_public[41] = {0}, server_secret[41] = {0};
  if (curve && zmq_curve_keypair(server_public, server_secret) != 0) {
    *error = "this libzmq has no CURVE";
    return -1;
  }
  int to_child[2], from_child[2];
  if (pipe(to_child) != 0 || pipe(from_child) != 0) {
    *error = "pipe failed";
    return -1;
  }
  const pid_t pid = fork();
  if (pid < 0) {
    *error = "fork failed";
    return -1;
  }
  if (pid == 0) {
    close(to_child[1]);
    RunClients(to_child[0], curve, server_public, bytes, clients, per_client);
  }
  close(to_child[0]);
  close(from_child[0]);
  close(from_child[1]);
  double result = -1;
  void* ctx = zmq_ctx_new();
  void* router = zmq_socket(ctx, ZMQ_ROUTER);
  const int unlimited = 0, timeout_ms = 20000, one = 1;
  zmq_setsockopt(router, ZMQ_RCVHWM, &unlimited, sizeof(unlimited));
  zmq_setsockopt(router, ZMQ_RCVTIMEO, &timeout_ms, sizeof(timeout_ms));
  if (curve) {
    zmq_setsockopt(router, ZMQ_CURVE_SERVER, &one, sizeof(one));
    zmq_setsockopt(router, ZMQ_CURVE_SECRETKEY, server_secret, 40);
  }
  char endpoint[256] = {0};
  size_t len = sizeof(endpoint);
  zmq_msg_t frame;
  zmq_msg_init(&frame);
  if (zmq_bind(router, "tcp://127.0.0.1:*") != 0 ||
      zmq_getsockopt(router, ZMQ_LAST_ENDPOINT, endpoint, &len) != 0) {
    *error = std::string("bind: ") + zmq_strerror(zmq_errno());
  } else {
    const uint32_t n = static_cast<uint32_t>(strnlen(endpoint, sizeof(endpoint)));
    bool ok = WriteAll(to_child[1], &n, sizeof(n)) && WriteAll(to_child[1], endpoint, n);
    for (int c = 0; ok && c < clients; ++c) ok = ReceiveOne(router, &frame);  // the hellos
    const double cpu0 = ProcessCpuSeconds();
    ok = ok && WriteAll(to_child[1], "g", 1);
    const int total = clients * per_client;
    for (int i = 0; ok && i < total; ++i) ok = ReceiveOne(router, &frame);
    const double cpu1 = ProcessCpuSeconds();
    if (ok) {
      result = (cpu1 - cpu0) / total * 1e6;
    } else {
      *error = "receiving timed out";
    }
    WriteAll(to_child[1], "d", 1);
  }
  zmq_msg_close(&frame);
  const int zero = 0;
  zmq_setsockopt(router, ZMQ_LINGER, &zero, sizeof(zero));
  zmq_close(router);
  zmq_ctx_term(ctx);
  close(to_child[1]);
  int status = 0;
  if (result < 0) kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return result;
}

}  // namespace

double CurveFigures::curve_us() const {
  if (zmq_curve_us > 0 && zmq_null_us > 0) return std::max(0.0, zmq_curve_us - zmq_null_us);
  return sodium_open_us;
}

CurveFigures MeasureCurve(size_t message_bytes, int clients, int messages) {
  CurveFigures f;
  f.message_bytes = message_bytes;
  f.messages = messages;
#if ELASTRA_SCALE_HAVE_SODIUM
  if (sodium_init() >= 0) {
    unsigned char pk1[crypto_box_PUBLICKEYBYTES], sk1[crypto_box_SECRETKEYBYTES];
    unsigned char pk2[crypto_box_PUBLICKEYBYTES], sk2[crypto_box_SECRETKEYBYTES];
    unsigned char key[crypto_box_BEFORENMBYTES], nonce[crypto_box_NONCEBYTES] = {0};
    crypto_box_keypair(pk1, sk1);
    crypto_box_keypair(pk2, sk2);
    const bool keyed = crypto_box_beforenm(key, pk1, sk2) == 0;
    // libzmq's CURVE MESSAGE: a flags byte and the frame, boxed with a per-message nonce.
    std::vector<unsigned char> plain(message_bytes + 1, 'x');
    std::vector<unsigned char> boxed(plain.size() + crypto_box_MACBYTES), opened(plain.size());
    crypto_box_easy_afternm(boxed.data(), plain.data(), plain.size(), nonce, key);
    const int reps = std::max(1000, messages);
    int bad = 0;
    const double cpu0 = ProcessCpuSeconds();
    for (int i = 0; i < reps; ++i) {
      bad += crypto_box_open_easy_afternm(opened.data(), boxed.data(), boxed.size(), nonce, key);
    }
    const double us = (ProcessCpuSeconds() - cpu0) * 1e6;
    if (keyed && bad == 0) f.sodium_open_us = us / reps;
  }
#endif
  const int per_client = std::max(1, messages / std::max(1, clients));
  std::string error;
  // The better of two runs each: the machine is shared.
  for (int run = 0; run < 2; ++run) {
    const double plain = RouterReceiveCost(false, message_bytes, clients, per_client, &error);
    const double curve = RouterReceiveCost(true, message_bytes, clients, per_client, &error);
    if (plain > 0) f.zmq_null_us = f.zmq_null_us < 0 ? plain : std::min(f.zmq_null_us, plain);
    if (curve > 0) f.zmq_curve_us = f.zmq_curve_us < 0 ? curve : std::min(f.zmq_curve_us, curve);
  }
  f.error = error;
  return f;
}

}  // namespace elastra::scale
