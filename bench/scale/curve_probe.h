// What the simulator does not run: ZeroMQ and CURVE on the coordinator's side, measured apart on
// this machine, per message of a given size:
//  - libsodium's crypto_box_open_easy_afternm (XSalsa20-Poly1305 with a precomputed key), what
//    libzmq's CURVE does to every message it receives;
//  - a real libzmq ROUTER receiving from DEALERs in another process over loopback TCP, with the
//    NULL mechanism and with CURVE: the receiving process's CPU time (its application thread and
//    libzmq's I/O thread) per message. The difference is what CURVE adds.
// Uses fork(); call it while the process has no other threads.
#pragma once

#include <string>

namespace elastra::scale {

struct CurveFigures {
  double sodium_open_us = -1;  // per message; -1 without libsodium
  double zmq_null_us = -1;     // per message received, NULL mechanism; -1 when it failed
  double zmq_curve_us = -1;    // per message received, CURVE
  size_t message_bytes = 0;
  int messages = 0;  // per mechanism
  std::string error;

  // CPU CURVE adds to each received message: the ROUTER's difference, else libsodium's figure.
  double curve_us() const;
};

// Measures with messages of `message_bytes` from `clients` DEALERs, `messages` in all.
CurveFigures MeasureCurve(size_t message_bytes, int clients, int messages);

}  // namespace elastra::scale
