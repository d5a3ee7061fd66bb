#include "dist/comm.h"

#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <limits>

namespace pagoda::dist {

struct Comm::Impl {
  MPI_Comm comm = MPI_COMM_WORLD;
};

Comm::~Comm() = default;

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
  comm->impl_ = std::make_unique<Impl>();
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
  MPI_Bcast(&n, 1, MPI_UINT64_T, root, impl_->comm);
  bytes->resize(n);
  for (uint64_t off = 0; off < n; off += kChunk)
    MPI_Bcast(bytes->data() + off, static_cast<int>(std::min<uint64_t>(kChunk, n - off)), MPI_BYTE, root, impl_->comm);
}

void Comm::all_reduce_sum(float* data, int64_t n) {
  for (int64_t off = 0; off < n; off += kChunk)
    MPI_Allreduce(MPI_IN_PLACE, data + off, static_cast<int>(std::min(kChunk, n - off)), MPI_FLOAT, MPI_SUM,
                  impl_->comm);
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
              impl_->comm);
}

void Comm::abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();
}

Comm* Comm::split(int color, int key) {
  std::unique_ptr<Comm> c(new Comm());
  c->impl_ = std::make_unique<Impl>();
  MPI_Comm_split(impl_->comm, color, key, &c->impl_->comm);
  MPI_Comm_rank(c->impl_->comm, &c->rank_);
  MPI_Comm_size(c->impl_->comm, &c->size_);
  children_.push_back(std::move(c));
  return children_.back().get();
}

void Comm::send(const float* data, int64_t n, int dest, int tag) {
  for (int64_t off = 0; off < n; off += kChunk)
    MPI_Send(data + off, static_cast<int>(std::min(kChunk, n - off)), MPI_FLOAT, dest, tag, impl_->comm);
}

void Comm::recv(float* data, int64_t n, int source, int tag) {
  for (int64_t off = 0; off < n; off += kChunk)
    MPI_Recv(data + off, static_cast<int>(std::min(kChunk, n - off)), MPI_FLOAT, source, tag, impl_->comm,
             MPI_STATUS_IGNORE);
}

}  // namespace pagoda::dist
