// Tensor parallelism end to end: `mpirun -np N pagoda ... --tp N` against
// the same command without MPI. Logits of random-weight F32 models within
// 1e-4 relative (the partial sums add in another order, nothing else may
// differ), and the bundled model's greedy text token-identical with 2 and 4
// ranks; clear errors for a job of the wrong size or a split that does not
// divide the KV heads. Skips when mpirun is not installed.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

struct RunResult {
  int exit_code = -1;
  std::string out, err;
};

RunResult run(const std::string& cmd) {
  const std::string err_path = (fs::temp_directory_path() / ("pagoda_tp_err_" + std::to_string(::getpid()))).string();
  RunResult r;
  FILE* p = popen((cmd + " 2>" + err_path).c_str(), "r");
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream e(err_path);
  std::stringstream ss;
  ss << e.rdbuf();
  r.err = ss.str();
  fs::remove(err_path);
  return r;
}

const std::string kBin = PAGODA_BINARY;
const std::string kBundled = std::string(PAGODA_SOURCE_DIR) + "/models/pagoda-small.gguf";

bool have_mpirun() { return std::system("command -v mpirun >/dev/null 2>&1") == 0; }

std::string mpirun(int np) {
  return "mpirun --oversubscribe --allow-run-as-root -np " + std::to_string(np) + " " + kBin;
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
  const std::vector<Case> cases = {
      {"gqa", "--preset tiny --n-head-kv 2", 2},
      {"mha", "--preset tiny-mha", 4},
      {"qwen3", "--preset tiny --arch qwen3 --n-head-kv 2", 2},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string model = (dir / (c.name + ".gguf")).string();
    auto r = run(kBin + " make-model " + c.make_args + " --dtype f32 -o " + model);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::string one = (dir / (c.name + ".1.f32")).string(), many = (dir / (c.name + ".n.f32")).string();
    r = run(kBin + " logits -m " + model + " -t 1 --ids '" + ids + "' -o " + one);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::string tp = std::to_string(c.tp);
    r = run(mpirun(c.tp) + " logits -m " + model + " -t 1 --tp " + tp + " --ids '" + ids + "' -o " + many);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::vector<float> a = read_floats(one), b = read_floats(many);
    ASSERT_EQ(a.size(), b.size());
    ASSERT_GT(a.size(), 20u * 512u - 1);
    EXPECT_LT(rel_diff(a, b), 1e-4);
    EXPECT_GT(rel_diff(a, b), 0.0) << "bit-identical: were the ranks really split?";
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
  for (int tp : {2, 4}) {
    const auto many = run(mpirun(tp) + args + " --tp " + std::to_string(tp));
    ASSERT_EQ(many.exit_code, 0) << many.err;
    EXPECT_EQ(many.out, one.out) << "--tp " << tp;
  }
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
