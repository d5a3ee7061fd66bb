// The MPI process group Pagoda's scale-out modes run on (OpenMPI from
// Debian; `mpirun -np N pagoda ...`): rank 0 runs the server and the
// scheduler, every rank a share of the model. A thin layer over the calls
// the engine needs, so nothing else includes <mpi.h>.
//
// Threads: MPI is initialized with MPI_THREAD_SERIALIZED — calls may come
// from any thread (the engine's, then the main one at shutdown) but never
// two at once.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"

namespace pagoda::dist {

class Comm {
 public:
  // MPI_COMM_WORLD, initializing MPI on first use. An error when MPI cannot
  // start or lacks thread support.
  static Result<Comm*> world();
  // Whether this process was started by mpirun (OpenMPI's or PMIx's
  // environment), without initializing anything.
  static bool launched_by_mpirun();
  // MPI_Finalize, if world() initialized it (at the end of main).
  static void finalize();

  int rank() const { return rank_; }
  int size() const { return size_; }

  // Root's bytes to every rank (the size first, then the bytes).
  void broadcast(std::vector<uint8_t>* bytes, int root = 0);
  // data = the sum of every rank's data (in place).
  void all_reduce_sum(float* data, int64_t n);
  // Root receives every rank's `send` in rank order into recv; counts[r] is
  // rank r's number of floats (at every rank; recv is used at root only).
  void gather(std::span<const float> send, std::span<const int64_t> counts, float* recv, int root = 0);
  // Ends every rank's process (an unrecoverable error on one rank).
  [[noreturn]] void abort(int code);

  // The ranks with the same color, ordered by key (MPI_Comm_split; every
  // rank of this group calls it). Owned by this Comm.
  Comm* split(int color, int key);
  // Point to point within this group (pipeline stages' hidden states).
  void send(const float* data, int64_t n, int dest, int tag);
  void recv(float* data, int64_t n, int source, int tag);

  ~Comm();

 private:
  Comm() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int rank_ = 0;
  int size_ = 1;
  std::vector<std::unique_ptr<Comm>> children_;
};

}  // namespace pagoda::dist
