// AWQ: folding scales keeps the unquantized model's function (to float
// rounding), the search never loses to plain rounding on its own measure,
// and an AWQ-quantized model stays as close to the original as RTN's.
#include "quant/awq.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "kernels/ref/quant_ref.h"
#include "quant/calibration.h"
#include "quant/gptq.h"
#include "quant/quantize_model.h"
#include "testing/make_model.h"

namespace pagoda::quant {
namespace {

namespace fs = std::filesystem;

struct Model {
  ModelConfig cfg;
  std::vector<uint8_t> bytes;
  std::unique_ptr<gguf::GGUFFile> file;
  float* tensor(const std::string& name) {
    const auto* t = file->tensor(name);
    if (!t) return nullptr;
    EXPECT_EQ(t->type, DType::kF32) << name;
    return reinterpret_cast<float*>(bytes.data() + (t->data - bytes.data()));
  }
};

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("pagoda_awq_test_" + std::to_string(::getpid()) + "_" + name)).string();
}

ModelConfig gqa_config() {
  auto cfg = model_preset("tiny");
  EXPECT_TRUE(cfg.is_ok());
  ModelConfig c = *cfg;
  c.hidden_size = 256;
  c.num_heads = 4;
  c.num_kv_heads = 2;  // attn_output's heads share their KV head's scale
  c.ffn_size = 512;
  c.num_layers = 3;
  return c;
}

std::string write_model(const std::string& name) {
  MakeModelOptions o;
  o.config = gqa_config();
  const std::string path = temp_path(name);
  EXPECT_TRUE(make_model(o, path).is_ok());
  return path;
}

Model load_bytes(const std::string& path) {
  Model m;
  std::ifstream f(path, std::ios::binary);
  m.bytes.assign(std::istreambuf_iterator<char>(f), {});
  auto file = gguf::GGUFFile::parse(m.bytes.data(), m.bytes.size());
  EXPECT_TRUE(file.is_ok());
  m.file = std::move(*file);
  auto cfg = model_config_from_gguf(*m.file);
  EXPECT_TRUE(cfg.is_ok());
  m.cfg = *cfg;
  return m;
}

// The final normed hidden state of every position (the output matrix's
// input): a function of every weight of the model.
std::vector<float> final_hidden(const gguf::GGUFFile& file) {
  auto lm = LlamaModel::load(file);
  EXPECT_TRUE(lm.is_ok()) << lm.status().message();
  std::vector<float> out;
  CalibrationRun run;
  run.threads = 2;
  run.observe_output = true;
  std::vector<std::vector<int32_t>> windows = {{1, 17, 33, 49, 65, 81, 97, 113, 129, 145, 161, 177},
                                               {1, 2, 3, 4, 5, 6, 7, 8, 9}};
  auto observer = [&](int32_t, LinearInput which, const float* x, int64_t width, int64_t n) {
    if (which == LinearInput::kOutput) out.assign(x, x + width * n);
  };
  EXPECT_TRUE(run_calibration(std::move(*lm), windows, observer, run).is_ok());
  return out;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, static_cast<double>(std::fabs(a[i] - b[i])));
  return d;
}

double max_abs(const std::vector<float>& a) {
  double m = 0;
  for (float v : a) m = std::max(m, static_cast<double>(std::fabs(v)));
  return m;
}

// The four fold points of layer il with random scales in [1/4, 4].
void fold_random(Model& m, int il, std::mt19937& rng) {
  const ModelConfig& c = m.cfg;
  const std::string p = "blk." + std::to_string(il) + ".";
  std::uniform_real_distribution<float> log_s(-1.386f, 1.386f);
  auto random_scales = [&](int64_t n) {
    std::vector<float> s(static_cast<size_t>(n));
    for (float& v : s) v = std::exp(log_s(rng));
    return s;
  };
  const int64_t hs = c.hidden_size, q = c.q_dim(), kv = c.kv_dim(), ff = c.ffn_size;
  AwqGroup qkv{{m.tensor(p + "attn_q.weight"), m.tensor(p + "attn_k.weight"), m.tensor(p + "attn_v.weight")},
               {q, kv, kv},
               {DType::kQ4_0, DType::kQ4_0, DType::kQ4_0},
               hs};
  qkv.norm = m.tensor(p + "attn_norm.weight");
  AwqGroup out{{m.tensor(p + "attn_output.weight")}, {hs}, {DType::kQ4_0}, q};
  out.prev = m.tensor(p + "attn_v.weight");
  out.prev_cols = hs;
  out.share = c.num_heads / c.num_kv_heads;
  out.head_dim = c.head_dim;
  AwqGroup gate_up{
      {m.tensor(p + "ffn_gate.weight"), m.tensor(p + "ffn_up.weight")}, {ff, ff}, {DType::kQ4_0, DType::kQ4_0}, hs};
  gate_up.norm = m.tensor(p + "ffn_norm.weight");
  AwqGroup down{{m.tensor(p + "ffn_down.weight")}, {hs}, {DType::kQ4_0}, ff};
  down.prev = m.tensor(p + "ffn_up.weight");
  down.prev_cols = hs;
  for (AwqGroup* g : {&qkv, &out, &gate_up, &down}) awq_fold(*g, random_scales(g->num_scales()));
}

TEST(Awq, FoldingKeepsTheUnquantizedFunction) {
  const std::string path = write_model("fold.gguf");
  Model m = load_bytes(path);
  fs::remove(path);
  const std::vector<float> before = final_hidden(*m.file);
  std::mt19937 rng(3);
  for (int il = 0; il < m.cfg.num_layers; ++il) fold_random(m, il, rng);
  const std::vector<float> after = final_hidden(*m.file);
  ASSERT_FALSE(before.empty());
  EXPECT_LT(max_abs_diff(before, after), 1e-5 * max_abs(before));
}

TEST(Awq, ScaleSharingFollowsTheKvHeads) {
  AwqGroup g;
  g.cols = 8 * 4;  // 8 heads of 4
  g.share = 4;     // 2 KV heads
  g.head_dim = 4;
  EXPECT_EQ(g.num_scales(), 8);
  EXPECT_EQ(g.src(0), 0);
  EXPECT_EQ(g.src(3 * 4 + 2), 2);      // head 3 -> kv head 0
  EXPECT_EQ(g.src(4 * 4 + 1), 4 + 1);  // head 4 -> kv head 1
  EXPECT_EQ(g.src(7 * 4 + 3), 4 + 3);
}

TEST(Awq, SearchNeverLosesToPlainRounding) {
  // A layer whose inputs have outlier channels: AWQ picks alpha > 0 and
  // lowers the output error.
  std::mt19937 rng(4);
  std::normal_distribution<float> g(0.0f, 1.0f);
  const int64_t rows = 32, cols = 256, n = 256;
  std::vector<float> w(static_cast<size_t>(rows * cols)), x(static_cast<size_t>(n * cols));
  for (float& v : w) v = 0.02f * g(rng);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t c = 0; c < cols; ++c) x[t * cols + c] = g(rng) * (c % 37 == 0 ? 20.0f : 1.0f);
  std::vector<double> h(static_cast<size_t>(cols * cols), 0.0);
  ThreadPool pool(2);
  accumulate_hessian(x.data(), cols, n, cols, h.data(), pool);
  std::vector<float> mean_abs(static_cast<size_t>(cols), 0.0f);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t c = 0; c < cols; ++c) mean_abs[c] += std::fabs(x[t * cols + c]) / n;
  AwqGroup grp{{w.data()}, {rows}, {DType::kQ4_0}, cols};
  std::vector<float> norm(static_cast<size_t>(cols), 1.0f);
  grp.norm = norm.data();
  AwqOptions opt;
  opt.max_rows = rows;
  double alpha = -1;
  const std::vector<float> s = awq_search(grp, h, mean_abs, opt, pool, &alpha);
  EXPECT_GT(alpha, 0.0);
  // Output error of rounding w * s, divided back, against plain rounding.
  auto error_with = [&](const std::vector<float>& scales) {
    double e = 0;
    std::vector<float> ws(static_cast<size_t>(cols)), q(static_cast<size_t>(cols));
    std::vector<uint8_t> b(dtype_row_bytes(DType::kQ4_0, cols));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) ws[c] = w[r * cols + c] * scales[c];
      ref::quantize_row(DType::kQ4_0, ws.data(), b.data(), cols);
      ref::dequantize_row(DType::kQ4_0, b.data(), q.data(), cols);
      for (int64_t t = 0; t < n; ++t) {
        double d = 0;
        for (int64_t c = 0; c < cols; ++c) d += x[t * cols + c] * (w[r * cols + c] - q[c] / scales[c]);
        e += d * d;
      }
    }
    return e;
  };
  EXPECT_LT(error_with(s), 0.8 * error_with(std::vector<float>(static_cast<size_t>(cols), 1.0f)));
}

TEST(Awq, QuantizedModelStaysAsCloseAsRtn) {
  const std::string in = write_model("in.gguf");
  std::string text;
  for (int i = 0; i < 80; ++i) text += "calibration sentence number " + std::to_string(i * 13) + " goes here. ";
  QuantizeOptions o;
  auto mix = parse_quant_mix("q8_0");
  ASSERT_TRUE(mix.is_ok());
  o.mix = *mix;
  o.threads = 2;
  ASSERT_TRUE(quantize_model(in, temp_path("rtn.gguf"), o).is_ok());
  o.method = Method::kAwq;
  o.calib_text = text;
  o.calib_ctx = 64;
  o.calib_windows = 4;
  auto r = quantize_model(in, temp_path("awq.gguf"), o);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->awq_alphas.size(), 3u * 4u);
  auto f_in = gguf::GGUFFile::open(in);
  auto f_rtn = gguf::GGUFFile::open(temp_path("rtn.gguf"));
  auto f_awq = gguf::GGUFFile::open(temp_path("awq.gguf"));
  ASSERT_TRUE(f_in.is_ok() && f_rtn.is_ok() && f_awq.is_ok());
  const std::vector<float> ref = final_hidden(**f_in);
  const double d_rtn = max_abs_diff(ref, final_hidden(**f_rtn));
  const double d_awq = max_abs_diff(ref, final_hidden(**f_awq));
  EXPECT_GT(d_rtn, 0.0);
  EXPECT_LT(d_awq, 1.5 * d_rtn);
  // Bad input: AWQ with an imatrix, or without text.
  o.imatrix_path = temp_path("none.gguf");
  EXPECT_FALSE(quantize_model(in, temp_path("x.gguf"), o).is_ok());
  o.imatrix_path.clear();
  o.calib_text.clear();
  EXPECT_FALSE(quantize_model(in, temp_path("x.gguf"), o).is_ok());
  for (const char* f : {"in.gguf", "rtn.gguf", "awq.gguf"}) fs::remove(temp_path(f));
}

}  // namespace
}  // namespace pagoda::quant
