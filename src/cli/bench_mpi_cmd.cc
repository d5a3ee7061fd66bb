// `mpirun -np N pagoda bench mpi`: the communication costs the scale-out
// modes pay, measured on this machine/network: an all-reduce (tensor
// parallelism, twice per layer) and a send/recv between neighbour ranks
// (pipeline parallelism, once per stage boundary and micro-batch) of the
// message sizes hidden_size x tokens x 4 bytes takes. docs/scale-out.md's
// cost model uses these numbers.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli_util.h"
#include "commands.h"

namespace pagoda::cli {

int bench_mpi(int argc, char** argv) {
  CLI::App app("Time MPI all-reduce and send/recv for the message sizes scale-out uses (run under mpirun)",
               "bench mpi");
  int32_t hidden = 2048;
  std::vector<int32_t> tokens = {1, 8, 64, 512};
  double min_seconds = 0.2;
  app.add_option("--hidden", hidden, "hidden size (floats per token; TinyLlama 2048)")->check(CLI::Range(1, 1 << 20));
  app.add_option("--tokens", tokens, "tokens per message (a decode batch, a prefill chunk)")->delimiter(',');
  app.add_option("--min-seconds", min_seconds, "time each size at least this long")->check(CLI::Range(0.0, 60.0));
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;
  if (!dist::Comm::launched_by_mpirun()) return fail("bench mpi", "run it under MPI: mpirun -np 2 pagoda bench mpi");
  auto world = dist::Comm::world();
  if (!world) return fail("bench mpi", world.status().message());
  TpSession session;
  dist::Comm& c = **world;
  if (c.size() < 2) return fail("bench mpi", "needs at least 2 processes");
  if (c.rank() == 0)
    std::printf("%d ranks, hidden %d: message = tokens x hidden x 4 bytes\n%8s %10s %14s %14s\n", c.size(), hidden,
                "tokens", "bytes", "allreduce_us", "sendrecv_us");
  for (int32_t t : tokens) {
    const int64_t n = int64_t{t} * hidden;
    std::vector<float> buf(static_cast<size_t>(n), 1.0f);
    auto time_it = [&](auto&& op) {
      op();  // warm-up
      // Every rank runs the same number of repetitions (rank 0 decides).
      std::vector<uint8_t> reps_msg(sizeof(int32_t));
      int32_t reps = 1;
      double elapsed = 0;
      while (true) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int32_t i = 0; i < reps; ++i) op();
        elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        int32_t more = c.rank() == 0 && elapsed < min_seconds ? reps * 2 : 0;
        std::memcpy(reps_msg.data(), &more, sizeof more);
        c.broadcast(&reps_msg);
        std::memcpy(&more, reps_msg.data(), sizeof more);
        if (more == 0) break;
        reps = more;
      }
      return elapsed / reps * 1e6;
    };
    const double ar = time_it([&] { c.all_reduce_sum(buf.data(), n); });
    // Ranks 0 and 1 ping-pong; one direction is half the round trip.
    const double sr = time_it([&] {
                        if (c.rank() == 0) {
                          c.send(buf.data(), n, 1, 0);
                          c.recv(buf.data(), n, 1, 1);
                        } else if (c.rank() == 1) {
                          c.recv(buf.data(), n, 0, 0);
                          c.send(buf.data(), n, 0, 1);
                        }
                      }) /
                      2;
    if (c.rank() == 0) std::printf("%8d %10lld %14.1f %14.1f\n", t, static_cast<long long>(n * 4), ar, sr);
  }
  return 0;
}

}  // namespace pagoda::cli
