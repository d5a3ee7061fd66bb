// SmoothQuant W8A8: the scales follow the paper's formula, the written file
// is an ordinary Q8_0 GGUF whose layer matrices have one scale per row and
// run as W8A8, and on a model with activation outlier channels the smoothed
// W8A8 model is far closer to the F32 model than W8A8 without smoothing
// (per-token activation scales are set by the outliers there).
#include "quant/smoothquant.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "kernels/matmul.h"
#include "kernels/ref/quant_ref.h"
#include "kv/kv_cache_manager.h"
#include "kv/kv_storage.h"
#include "model/llama_model.h"
#include "quant/quantize_model.h"
#include "testing/make_model.h"

namespace pagoda::quant {
namespace {

namespace fs = std::filesystem;

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("pagoda_sq_test_" + std::to_string(::getpid()) + "_" + name)).string();
}

TEST(SmoothQuant, ScalesFollowThePaper) {
  // Two matrices, 4 input columns; column 3 never sees activation.
  std::vector<float> a = {1, -2, 0.5f, 1, /* row 1 */ 0.25f, 1, -4, 2};
  std::vector<float> b = {-3, 1, 1, 0};
  AwqGroup g{{a.data(), b.data()}, {2, 1}, {DType::kQ8_0, DType::kQ8_0}, 4};
  const std::vector<float> act = {8, 0.5f, 2, 0};
  for (float alpha : {0.5f, 0.8f}) {
    const std::vector<float> s = smoothquant_scales(g, act, alpha);
    ASSERT_EQ(s.size(), 4u);
    const float wmax[] = {3, 2, 4};
    for (int j = 0; j < 3; ++j) EXPECT_NEAR(s[j], std::pow(act[j], alpha) / std::pow(wmax[j], 1 - alpha), 1e-6) << j;
    EXPECT_EQ(s[3], 1.0f);  // no activation: left alone
  }
  // attn_output under GQA: 2 heads of dim 2 share one KV head, so columns
  // c and c + 2 share a scale: their max over both.
  std::vector<float> o = {1, 1, 3, 1};
  AwqGroup og{{o.data()}, {1}, {DType::kQ8_0}, 4};
  og.share = 2;
  og.head_dim = 2;
  const std::vector<float> s = smoothquant_scales(og, {1, 9, 4, 1}, 0.5f);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_NEAR(s[0], std::sqrt(4.0f) / std::sqrt(3.0f), 1e-6);
  EXPECT_NEAR(s[1], std::sqrt(9.0f) / std::sqrt(1.0f), 1e-6);
}

struct Files {
  std::string f32, sq, plain, rtn;
  ~Files() {
    for (const auto* p : {&f32, &sq, &plain, &rtn})
      if (!p->empty()) fs::remove(*p);
  }
};

std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

// A random F32 model whose layer inputs have outlier channels (x 40 in the
// norm weights, / 40 in the columns reading them: the same function).
std::string outlier_model() {
  MakeModelOptions o;
  o.config = model_preset("tiny").value();
  o.config.hidden_size = 256;
  o.config.num_heads = 4;
  o.config.num_kv_heads = 2;
  o.config.ffn_size = 512;
  o.config.num_layers = 2;
  o.seed = 11;
  const std::string path = temp_path("f32.gguf");
  EXPECT_TRUE(make_model(o, path).is_ok());
  std::vector<uint8_t> bytes = read_all(path);
  auto file = gguf::GGUFFile::parse(bytes.data(), bytes.size());
  EXPECT_TRUE(file.is_ok());
  auto f32 = [&](const std::string& name) {
    const auto* t = (*file)->tensor(name);
    EXPECT_TRUE(t && t->type == DType::kF32) << name;
    return reinterpret_cast<float*>(bytes.data() + (t->data - bytes.data()));
  };
  const int64_t hs = o.config.hidden_size;
  for (int il = 0; il < o.config.num_layers; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    const std::pair<const char*, std::vector<std::string>> groups[] = {
        {"attn_norm.weight", {"attn_q.weight", "attn_k.weight", "attn_v.weight"}},
        {"ffn_norm.weight", {"ffn_gate.weight", "ffn_up.weight"}}};
    for (const auto& [norm, mats] : groups)
      for (int64_t c : {int64_t{5}, int64_t{130}}) {
        f32(p + norm)[c] *= 40.0f;
        for (const std::string& m : mats) {
          const auto* t = (*file)->tensor(p + m);
          float* w = f32(p + m);
          for (int64_t r = 0; r < t->dims[1]; ++r) w[r * hs + c] /= 40.0f;
        }
      }
  }
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  return path;
}

bool is_layer_matrix(const std::string& name) {
  for (const char* m : {"attn_q.", "attn_k.", "attn_v.", "attn_output.", "ffn_gate.", "ffn_up.", "ffn_down."})
    if (name.find(m) != std::string::npos) return true;
  return false;
}

// W8A8 without smoothing: the layer matrices as shared-scale Q8_0 rows,
// everything else as the SmoothQuant file has it (Q8_0 per block / F32).
std::string plain_w8a8(const std::string& f32_path) {
  auto in = gguf::GGUFFile::open(f32_path);
  EXPECT_TRUE(in.is_ok());
  gguf::GGUFWriter w;
  for (const auto& [k, v] : (*in)->metadata())
    if (k != "general.alignment") w.set(k, v);
  w.set("pagoda.w8a8", gguf::Value::make_bool(true));
  std::vector<std::vector<uint8_t>> bufs;
  bufs.reserve((*in)->tensors().size());
  for (const auto& t : (*in)->tensors()) {
    if (t.dims.size() != 2) {
      w.add_tensor(t.name, t.dims, t.type, t.data, t.num_bytes);
      continue;
    }
    const int64_t cols = t.dims[0], rows = t.dims[1];
    const size_t rb = dtype_row_bytes(DType::kQ8_0, cols);
    auto& out = bufs.emplace_back(rb * rows);
    const auto* x = reinterpret_cast<const float*>(t.data);
    for (int64_t r = 0; r < rows; ++r) {
      if (is_layer_matrix(t.name))
        ref::quantize_row_q8_0_shared_scale(x + r * cols, out.data() + r * rb, cols);
      else
        ref::quantize_row(DType::kQ8_0, x + r * cols, out.data() + r * rb, cols);
    }
    w.add_tensor(t.name, t.dims, DType::kQ8_0, out.data(), out.size());
  }
  const std::string path = temp_path("plain.gguf");
  EXPECT_TRUE(w.write(path).is_ok());
  return path;
}

// Logits of every position, with the weights repacked for the active ISA
// (the packed W8A8 kernels) or not (the scalar reference).
std::vector<float> logits(const std::string& path, bool repack, int32_t* num_row_scaled = nullptr) {
  auto file = gguf::GGUFFile::open(path);
  EXPECT_TRUE(file.is_ok());
  auto model = LlamaModel::load(**file);
  EXPECT_TRUE(model.is_ok()) << model.status().message();
  if (!model.is_ok()) return {};
  ThreadPool pool(2);
  if (repack) (*model)->repack(pool);
  if (num_row_scaled) *num_row_scaled = (*model)->num_row_scaled();
  const auto& c = (*model)->config();
  const std::vector<int32_t> tokens = {1, 57, 300, 12, 499, 8, 8, 250, 3, 77, 123, 400, 17, 2, 5, 90, 91, 92, 6};
  const int n = static_cast<int>(tokens.size());
  KVCacheManager kv(16, 16);
  KVStorage storage(c.num_layers, 16, 16, c.num_kv_heads, c.head_dim);
  EXPECT_TRUE(kv.allocate_slots(SeqId{0}, n));
  ForwardBatch b;
  b.tokens = tokens;
  for (int i = 0; i < n; ++i) {
    b.positions.push_back(i);
    b.slots.push_back(kv.slot_of(SeqId{0}, i));
    b.logit_rows.push_back(i);
  }
  b.seqs.push_back({0, n, n, kv.block_table(SeqId{0}).data()});
  std::vector<float> out(static_cast<size_t>(n) * c.vocab_size);
  (*model)->forward(b, storage, pool, out.data());
  return out;
}

double rel_rms(const std::vector<float>& got, const std::vector<float>& ref) {
  EXPECT_EQ(got.size(), ref.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

TEST(SmoothQuant, W8A8FileRunsAndBeatsUnsmoothedW8A8) {
  Files f;
  f.f32 = outlier_model();
  f.sq = temp_path("sq.gguf");
  std::string text;
  for (int i = 0; i < 60; ++i) text += "calibration line " + std::to_string(i * 7) + " of the smoothing pass. ";
  QuantizeOptions o;
  o.mix = parse_quant_mix("q8_0").value();
  o.method = Method::kSmoothQuant;
  o.calib_text = text;
  o.calib_ctx = 64;
  o.calib_windows = 4;
  o.threads = 2;
  auto r = quantize_model(f.f32, f.sq, o);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->num_w8a8, 2 * 7);
  EXPECT_EQ(r->awq_alphas.size(), 2u * 4u);  // one line per smoothed group

  // An ordinary Q8_0 file (llama.cpp reads it), marked for Pagoda, every
  // layer matrix with one scale per row.
  auto file = gguf::GGUFFile::open(f.sq);
  ASSERT_TRUE(file.is_ok());
  EXPECT_EQ((*file)->get_bool("pagoda.w8a8"), std::optional<bool>(true));
  int shared = 0;
  for (const auto& t : (*file)->tensors()) {
    EXPECT_TRUE(t.type == DType::kQ8_0 || t.type == DType::kF32) << t.name;
    if (t.type != DType::kQ8_0) continue;
    kernels::WeightView w{t.type, t.data, t.dims[0], t.num_elements() / t.dims[0]};
    EXPECT_EQ(kernels::q8_0_rows_share_scale(w), is_layer_matrix(t.name)) << t.name;
    shared += is_layer_matrix(t.name);
  }
  EXPECT_EQ(shared, 14);

  f.plain = plain_w8a8(f.f32);
  f.rtn = temp_path("rtn.gguf");
  QuantizeOptions rtn;
  rtn.mix = o.mix;
  rtn.threads = 2;
  ASSERT_TRUE(quantize_model(f.f32, f.rtn, rtn).is_ok());
  const std::vector<float> ref = logits(f.f32, true);
  int32_t n_sq = 0, n_plain = 0;
  const std::vector<float> sq = logits(f.sq, true, &n_sq);
  const std::vector<float> sq_scalar = logits(f.sq, false);
  const std::vector<float> plain = logits(f.plain, true, &n_plain);
  EXPECT_EQ(n_sq, 14);
  EXPECT_EQ(n_plain, 14);
  const double e_sq = rel_rms(sq, ref), e_plain = rel_rms(plain, ref), e_isa = rel_rms(sq, sq_scalar);
  const double e_rtn = rel_rms(logits(f.rtn, true), ref);
  std::printf(
      "[ measured ] relative RMS logit error vs F32: SmoothQuant W8A8 %.5f, unsmoothed W8A8 %.5f, "
      "Q8_0 (per-block scales) %.5f; packed vs scalar %.2g\n",
      e_sq, e_plain, e_rtn, e_isa);
  EXPECT_LT(e_sq, 0.5 * e_plain);
  EXPECT_LT(e_sq, e_rtn);  // per-block activation scales still meet the outliers
  EXPECT_LT(e_sq, 0.05);
  EXPECT_LT(e_isa, 1e-4);  // the W8A8 dots are bit-identical; the rest is float order

  // The same file without the mark runs as plain Q8_0 (nothing row-scaled).
  std::vector<uint8_t> bytes = read_all(f.sq);
  auto parsed = gguf::GGUFFile::parse(bytes.data(), bytes.size());
  ASSERT_TRUE(parsed.is_ok());
  gguf::GGUFWriter w;
  for (const auto& [k, v] : (*parsed)->metadata())
    if (k != "pagoda.w8a8" && k != "general.alignment") w.set(k, v);
  for (const auto& t : (*parsed)->tensors()) w.add_tensor(t.name, t.dims, t.type, t.data, t.num_bytes);
  const std::string unmarked = temp_path("unmarked.gguf");
  ASSERT_TRUE(w.write(unmarked).is_ok());
  int32_t n_unmarked = -1;
  logits(unmarked, true, &n_unmarked);
  EXPECT_EQ(n_unmarked, 0);
  fs::remove(unmarked);
}

TEST(SmoothQuant, BadInputGivesClearErrors) {
  Files f;
  f.f32 = outlier_model();
  QuantizeOptions o;
  o.mix = parse_quant_mix("q4_0").value();
  o.method = Method::kSmoothQuant;
  o.calib_text = "some text to calibrate on, long enough for a window or two of tokens.";
  o.calib_ctx = 16;
  auto r = quantize_model(f.f32, temp_path("x.gguf"), o);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("q8_0"), std::string::npos) << r.status().message();
  o.mix = parse_quant_mix("q8_0").value();
  o.smooth_alpha = 1.5f;
  r = quantize_model(f.f32, temp_path("x.gguf"), o);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("alpha"), std::string::npos) << r.status().message();
  o.smooth_alpha = 0.5f;
  o.calib_text.clear();
  r = quantize_model(f.f32, temp_path("x.gguf"), o);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("calibration"), std::string::npos) << r.status().message();
  fs::remove(temp_path("x.gguf"));
}

}  // namespace
}  // namespace pagoda::quant
