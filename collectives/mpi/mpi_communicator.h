// The MPI backend: CPU collectives in a fixed mpirun world. Groups come from MPI_Comm_split of the
// world (or of a group), so a planned shrink inside the world is a split to a smaller
// communicator. Every call is non-blocking MPI polled with MPI_Test against its deadline: a peer
// that does not show up is kTimedOut, never a hang. Buffers pass through staging memory owned by
// the library, so a call abandoned at its deadline never writes into (or reads from) the caller's
// buffer later; the abandoned request is progressed in the background until it completes.
//
// Point-to-point: Send, Recv and Exchange() (every transfer of a list posted at once) take any
// size; above INT_MAX bytes a transfer goes as several messages. A receive matches its message
// with MPI_Improbe before receiving it, so sizes that disagree are kCorrupt without the truncated
// receive that Open MPI 4.1 lets write past the buffer.
//
// What it cannot do (use the Gloo backend, the default, for these): grow past the mpirun world
// (no new process can join an MPI communicator), and survive a killed rank: with Open MPI 4 a dead
// peer shows as kTimedOut at best, and the job's MPI state is not usable afterwards.
//
// Needs MPI initialized with at least MPI_THREAD_SERIALIZED (the mpirun bootstrap does that).
// Thread-compatible; Abort() may be called from any thread (it only sets a flag the polling loop
// reads, so no MPI call is made from that thread). After the first error other than
// kInvalidArgument the communicator is broken and every later call returns the same status.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>

#include "elastra/communicator.h"
#include "elastra/status.h"

namespace elastra {

class MpiCommunicator : public Communicator {
 public:
  // A group of this communicator: collective over all its ranks. Ranks passing the same
  // `color` (>= 0) form one group, ordered by `key` then by rank here; color < 0 means "in no
  // group" and returns nullptr. kTimedOut when a rank does not take part within `timeout` (the
  // colors are exchanged with a polled allgather first, so MPI_Comm_split itself only runs once
  // every rank is known to be there).
  virtual StatusOr<std::unique_ptr<MpiCommunicator>> Split(int color, int key,
                                                           Timeout timeout) = 0;
};

// A communicator over MPI_COMM_WORLD (duplicated). kFailedPrecondition when MPI is not
// initialized (or already finalized) or provides less than MPI_THREAD_SERIALIZED,
// kInvalidArgument for a non-positive timeout.
StatusOr<std::unique_ptr<MpiCommunicator>> CreateMpiWorldCommunicator(
    std::chrono::milliseconds default_timeout);

// Tests only: the largest piece of a Send, Recv or Exchange() transfer sent as one MPI message
// (MPI counts are int, so the default and the most is INT_MAX bytes; 0 restores it). Returns the
// previous value. Larger transfers go as consecutive pieces, which match in order like whole
// messages.
size_t SetMpiPieceBytesForTesting(size_t bytes);

// Progresses the requests left behind by calls that timed out or were aborted; returns how many
// are still pending. Call before MPI_Finalize (which would otherwise wait for them).
int ProgressAbandonedMpiRequests();

}  // namespace elastra
