// The wire protocol between workers, agents, admin clients and the coordinator: the one place where
// messages are defined. docs/protocol.md tells the sequences; these headers tell the bytes.
//
// Every ZeroMQ frame is one Envelope (cereal binary, decoded with BoundedInputArchive): magic,
// protocol version, message type, job, generation, sender, request id, payload. The payload is the
// cereal encoding of the struct named by the type. Requests carry a request id that the reply
// repeats; pushes from the coordinator carry request id 0.
//
// The definitions live by who talks to whom; this header includes them all:
//   message_vocabulary.h  the version, the enums, MessageType, Envelope, ErrorReply, Ack
//   worker_messages.h     worker <-> coordinator
//   admin_messages.h      admin client -> coordinator (resize, drain, status)
//   agent_messages.h      agent <-> coordinator
#pragma once

#include "protocol/admin_messages.h"  // IWYU pragma: export
#include "protocol/agent_messages.h"  // IWYU pragma: export
#include "protocol/message_vocabulary.h"  // IWYU pragma: export
#include "protocol/worker_messages.h"  // IWYU pragma: export
