// Tensor and pipeline parallelism end to end: `mpirun -np N pagoda ...
// --tp T --pp P` against the same command without MPI. Logits of
// random-weight F32 models within 1e-4 relative (tensor parallelism's
// partial sums add in another order, nothing else may differ) for TP 2, 4,
// PP 2, 4 and TP 2 x PP 2; the bundled model's greedy text token-identical
// with each split, also through `pagoda serve` with concurrent requests;
// clear errors for a job of the wrong size or a split that does not divide
// the KV heads. Skips when mpirun is not installed.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../build_kind.h"
#include "../run_command.h"

namespace {

namespace fs = std::filesystem;

using pagoda::testing_util::RunResult;

RunResult run(const std::string& cmd) { return pagoda::testing_util::run_command(cmd); }

const std::string kBin = PAGODA_BINARY;
const std::string kBundled = std::string(PAGODA_SOURCE_DIR) + "/models/pagoda-small.gguf";

bool have_mpirun() { return std::system("command -v mpirun >/dev/null 2>&1") == 0; }

// Under ASan, OpenMPI's components (loaded and unloaded with dlopen) leave
// allocations LeakSanitizer cannot attribute to a module to suppress: the
// ranks run without the leak check (every other check stays on).
std::string mpirun(int np) {
  const std::string env = pagoda::testing_util::kSanitized ? "ASAN_OPTIONS=\"${ASAN_OPTIONS:-}:detect_leaks=0\" " : "";
  return env + "mpirun --oversubscribe --allow-run-as-root -np " + std::to_string(np) + " " + kBin;
}

std::vector<float> read_floats(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<float> v((fs::file_size(path)) / sizeof(float));
  f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  return v;
}

// max |a - b| / max |a|
double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d = std::max(d, static_cast<double>(std::fabs(a[i] - b[i])));
    m = std::max(m, static_cast<double>(std::fabs(a[i])));
  }
  return d / m;
}

#define SKIP_WITHOUT_MPIRUN() \
  if (!have_mpirun()) GTEST_SKIP() << "mpirun is not installed (scripts/setup.sh installs openmpi-bin)"

TEST(TensorParallel, LogitsMatchOneProcessOnRandomModels) {
  SKIP_WITHOUT_MPIRUN();
  const fs::path dir = fs::temp_directory_path() / ("pagoda_tp_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string ids = "1 45 99 300 12 7 88 411 23 5 17 400 3 9 250 77 61 2 190 33";
  struct Case {
    std::string name, make_args;
    int tp;
  };
  struct Split {
    int tp, pp;
  };
  const std::vector<Case> cases = {
      {"gqa", "--preset tiny --n-head-kv 2", 2},
      {"mha", "--preset tiny-mha", 4},
      {"qwen3", "--preset tiny --arch qwen3 --n-head-kv 2", 2},
      {"pp", "--preset tiny --n-head-kv 2 --n-layer 4", 0},  // pipeline cases below
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string model = (dir / (c.name + ".gguf")).string();
    auto r = run(kBin + " make-model " + c.make_args + " --dtype f32 -o " + model);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::string one = (dir / (c.name + ".1.f32")).string(), many = (dir / (c.name + ".n.f32")).string();
    r = run(kBin + " logits -m " + model + " -t 1 --ids '" + ids + "' -o " + one);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::vector<float> a = read_floats(one);
    ASSERT_GE(a.size(), 20u * 512u);
    // Pipeline stages alone move hidden states (and cut the prompt into
    // micro-batches): nothing is summed in another order.
    const std::vector<Split> splits =
        c.tp > 0 ? std::vector<Split>{{c.tp, 1}} : std::vector<Split>{{1, 2}, {1, 4}, {2, 2}};
    for (const Split& sp : splits) {
      SCOPED_TRACE("tp " + std::to_string(sp.tp) + " pp " + std::to_string(sp.pp));
      r = run(mpirun(sp.tp * sp.pp) + " logits -m " + model + " -t 1 --tp " + std::to_string(sp.tp) + " --pp " +
              std::to_string(sp.pp) + " --ids '" + ids + "' -o " + many);
      ASSERT_EQ(r.exit_code, 0) << r.err;
      const std::vector<float> b = read_floats(many);
      ASSERT_EQ(a.size(), b.size());
      EXPECT_LT(rel_diff(a, b), 1e-4);
      if (sp.tp > 1) {
        EXPECT_GT(rel_diff(a, b), 0.0) << "bit-identical: were the heads really split?";
      }
    }
  }
  fs::remove_all(dir);
}

TEST(TensorParallel, BundledModelGreedyTextIsTheSame) {
  SKIP_WITHOUT_MPIRUN();
  const std::string args =
      " generate -m " + kBundled + " -p 'Once upon a time the little fox' -n 40 --temp 0 --ignore-eos -t 1";
  const auto one = run(kBin + args);
  ASSERT_EQ(one.exit_code, 0) << one.err;
  ASSERT_GT(one.out.size(), 60u);
  for (const char* split : {"2 --tp 2", "4 --tp 4", "2 --pp 2", "4 --tp 2 --pp 2", "3 --pp 3"}) {
    const std::string s = split;
    const auto many = run(mpirun(std::stoi(s.substr(0, 1))) + args + s.substr(1));
    ASSERT_EQ(many.exit_code, 0) << many.err;
    EXPECT_EQ(many.out, one.out) << "-np " << split;
  }
}

// `pagoda serve` under mpirun (TP 2 x PP 2): concurrent greedy requests,
// batched into shared steps and micro-batches, each get the text `pagoda
// generate` prints for its prompt alone in one process.
TEST(TensorParallel, ServeConcurrentRequestsMatchOneProcess) {
  SKIP_WITHOUT_MPIRUN();
  const std::vector<std::string> prompts = {"Once upon a time",   "The little fox ran over the hill and saw",
                                            "And the LORD said",  "In the beginning",
                                            "A man who is a man", "The word of the world"};
  std::vector<std::string> want;
  for (const std::string& p : prompts) {
    const auto r = run(kBin + " generate -m " + kBundled + " -p '" + p + "' -n 24 --temp 0 --ignore-eos -t 1");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    ASSERT_EQ(r.out.rfind(p, 0), 0u);
    want.push_back(r.out.substr(p.size(), r.out.size() - p.size() - 1));  // the continuation, without the newline
  }
  const int port = 20000 + static_cast<int>(::getpid() % 20000);
  const std::string log = (fs::temp_directory_path() / ("pagoda_tp_serve_" + std::to_string(::getpid()))).string();
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const std::string cmd = "exec env " + mpirun(4) + " serve -m " + kBundled + " -t 1 --tp 2 --pp 2 --port " +
                            std::to_string(port) + " >" + log + " 2>&1";
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60, 0);
  bool up = false;
  for (int i = 0; i < 300 && !up; ++i) {
    auto h = c.Get("/health");
    up = h && h->status == 200;
    if (!up) ::usleep(100 * 1000);
  }
  ASSERT_TRUE(up) << "the server did not start; its log: " << log;
  std::vector<std::string> got(prompts.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < prompts.size(); ++i)
    clients.emplace_back([&, i] {
      httplib::Client ci("127.0.0.1", port);
      ci.set_read_timeout(60, 0);
      const std::string body =
          R"({"prompt":")" + prompts[i] + R"(","max_tokens":24,"temperature":0,"ignore_eos":true})";
      auto r = ci.Post("/v1/completions", body, "application/json");
      if (r && r->status == 200) got[i] = nlohmann::json::parse(r->body)["choices"][0]["text"];
    });
  for (auto& t : clients) t.join();
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(got[i], want[i]) << prompts[i];
  // mpirun exits 1 after forwarding a signal; rank 0 must have shut down in order.
  EXPECT_TRUE(WIFEXITED(status)) << "log: " << log;
  std::ifstream f(log);
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_NE(ss.str().find("SIGTERM received, shutting down"), std::string::npos) << ss.str();
  EXPECT_EQ(ss.str().find("error"), std::string::npos) << ss.str();
  fs::remove(log);
}

TEST(TensorParallel, ClearErrors) {
  SKIP_WITHOUT_MPIRUN();
  const std::string args = " generate -m " + kBundled + " -p x -n 2 -t 1";
  auto r = run(kBin + args + " --tp 2");  // not under mpirun
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("mpirun -np 2"), std::string::npos) << r.err;
  r = run(mpirun(2) + args + " --tp 3");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("needs 3 MPI processes; this job has 2"), std::string::npos) << r.err;
  r = run(mpirun(8) + args + " --tp 8");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("must divide the model's 4 KV heads"), std::string::npos) << r.err;
  r = run(mpirun(2) + args + " --tp 2 --spec ngram");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("tensor parallelism"), std::string::npos) << r.err;
}

}  // namespace
