#include "dist/comm.h"

#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <limits>

namespace pagoda::dist {

namespace {

bool g_initialized_here = false;

// MPI counts are ints: large buffers go in pieces.
constexpr int64_t kChunk = int64_t{1} << 28;

}  // namespace

bool Comm::launched_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr ||
         std::getenv("PMI_RANK") != nullptr;
}

Result<Comm*> Comm::world() {
  static Comm* comm = nullptr;
  if (comm) return comm;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
      return Status(StatusCode::kUnavailable, "MPI could not start");
    g_initialized_here = true;
    if (provided < MPI_THREAD_SERIALIZED)
      return Status(StatusCode::kUnavailable, "this MPI library lacks MPI_THREAD_SERIALIZED support");
  }
  comm = new Comm();
  MPI_Comm_rank(MPI_COMM_WORLD, &comm->rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &comm->size_);
  return comm;
}

void Comm::finalize() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (g_initialized_here && !finalized) MPI_Finalize();
}

void Comm::broadcast(std::vector<uint8_t>* bytes, int root) {
  uint64_t n = bytes->size();
  MPI_Bcast(&n, 1, MPI_UINT64_T, root, MPI_COMM_WORLD);
  bytes->resize(n);
  for (uint64_t off = 0; off < n; off += kChunk)
    MPI_Bcast(bytes->data() + off, static_cast<int>(std::min<uint64_t>(kChunk, n - off)), MPI_BYTE, root,
              MPI_COMM_WORLD);
}

void Comm::all_reduce_sum(float* data, int64_t n) {
  for (int64_t off = 0; off < n; off += kChunk)
    MPI_Allreduce(MPI_IN_PLACE, data + off, static_cast<int>(std::min(kChunk, n - off)), MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
}

void Comm::gather(std::span<const float> send, std::span<const int64_t> counts, float* recv, int root) {
  std::vector<int> cnt(static_cast<size_t>(size_)), disp(static_cast<size_t>(size_));
  int64_t total = 0;
  for (int r = 0; r < size_; ++r) {
    cnt[static_cast<size_t>(r)] = static_cast<int>(counts[static_cast<size_t>(r)]);
    disp[static_cast<size_t>(r)] = static_cast<int>(total);
    total += counts[static_cast<size_t>(r)];
  }
  if (total > std::numeric_limits<int>::max()) abort(3);  // a step's logits stay far below 2^31 floats
  MPI_Gatherv(send.data(), static_cast<int>(send.size()), MPI_FLOAT, recv, cnt.data(), disp.data(), MPI_FLOAT, root,
              MPI_COMM_WORLD);
}

void Comm::abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();
}

}  // namespace pagoda::dist
