// The flat-batch forward pass against a plain float64 implementation written
// independently here (full causal attention, no cache, no batching).
#include <gtest/gtest.h>

#include <cmath>
#include <initializer_list>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gguf/gguf_writer.h"
#include "kv/kv_cache_manager.h"
#include "kv/kv_storage.h"
#include "model/llama_model.h"

namespace pagoda {
namespace {

struct Shape {
  std::string arch;
  int vocab_size, hidden_size, num_layers, num_heads, num_kv_heads, ffn_size;
};

// A random model kept as float tensors; written to GGUF for the engine.
struct RandomModel {
  Shape s;
  std::map<std::string, std::vector<float>> t;
  std::vector<uint8_t> bytes;
  std::unique_ptr<gguf::GGUFFile> file;

  int head_dim() const { return s.hidden_size / s.num_heads; }

  explicit RandomModel(const Shape& shape, uint32_t seed) : s(shape) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    gguf::GGUFWriter w;
    w.set("general.architecture", gguf::Value::make_string(s.arch));
    const std::string a = s.arch + ".";
    w.set(a + "embedding_length", gguf::Value::make_u32(s.hidden_size));
    w.set(a + "block_count", gguf::Value::make_u32(s.num_layers));
    w.set(a + "feed_forward_length", gguf::Value::make_u32(s.ffn_size));
    w.set(a + "attention.head_count", gguf::Value::make_u32(s.num_heads));
    w.set(a + "attention.head_count_kv", gguf::Value::make_u32(s.num_kv_heads));
    w.set(a + "context_length", gguf::Value::make_u32(256));
    w.set(a + "rope.freq_base", gguf::Value::make_f32(500.0f));
    w.set(a + "attention.layer_norm_rms_epsilon", gguf::Value::make_f32(1e-5f));
    const int hd = head_dim();
    auto add = [&](const std::string& name, int64_t n_in, int64_t n_out, float scale, float offset) {
      auto& v = t[name];
      v.resize(n_in * n_out);
      for (auto& x : v) x = offset + scale * nd(rng);
      std::vector<int64_t> dims = n_out == 1 ? std::vector<int64_t>{n_in} : std::vector<int64_t>{n_in, n_out};
      w.add_tensor(name, dims, DType::kF32, v.data(), v.size() * 4);
    };
    add("token_embd.weight", s.hidden_size, s.vocab_size, 1.0f, 0);
    add("output_norm.weight", s.hidden_size, 1, 0.1f, 1.0f);
    add("output.weight", s.hidden_size, s.vocab_size, 1.0f / std::sqrt(s.hidden_size), 0);
    for (int l = 0; l < s.num_layers; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      add(p + "attn_norm.weight", s.hidden_size, 1, 0.1f, 1.0f);
      add(p + "ffn_norm.weight", s.hidden_size, 1, 0.1f, 1.0f);
      add(p + "attn_q.weight", s.hidden_size, s.num_heads * hd, 1.0f / std::sqrt(s.hidden_size), 0);
      add(p + "attn_k.weight", s.hidden_size, s.num_kv_heads * hd, 1.0f / std::sqrt(s.hidden_size), 0);
      add(p + "attn_v.weight", s.hidden_size, s.num_kv_heads * hd, 1.0f / std::sqrt(s.hidden_size), 0);
      add(p + "attn_output.weight", s.num_heads * hd, s.hidden_size, 0.5f / std::sqrt(s.hidden_size), 0);
      add(p + "ffn_gate.weight", s.hidden_size, s.ffn_size, 1.0f / std::sqrt(s.hidden_size), 0);
      add(p + "ffn_up.weight", s.hidden_size, s.ffn_size, 1.0f / std::sqrt(s.hidden_size), 0);
      add(p + "ffn_down.weight", s.ffn_size, s.hidden_size, 0.5f / std::sqrt(s.ffn_size), 0);
      if (s.arch == "qwen2") {
        add(p + "attn_q.bias", s.num_heads * hd, 1, 0.1f, 0);
        add(p + "attn_k.bias", s.num_kv_heads * hd, 1, 0.1f, 0);
        add(p + "attn_v.bias", s.num_kv_heads * hd, 1, 0.1f, 0);
      }
    }
    bytes = w.to_bytes();
    auto f = gguf::GGUFFile::parse(bytes.data(), bytes.size());
    EXPECT_TRUE(f.is_ok()) << f.status().message();
    file = std::move(f).value();
  }

  // y[o] = sum_i W[o][i] x[i], W stored row-major [n_out][n_in].
  std::vector<double> lin(const std::string& name, const std::vector<double>& x, int64_t n_out) const {
    const auto& w = t.at(name);
    const int64_t n_in = static_cast<int64_t>(x.size());
    std::vector<double> y(n_out, 0.0);
    for (int64_t o = 0; o < n_out; ++o)
      for (int64_t i = 0; i < n_in; ++i) y[o] += double{w[o * n_in + i]} * x[i];
    return y;
  }
  std::vector<double> norm(const std::string& name, const std::vector<double>& x) const {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double inv = 1.0 / std::sqrt(ss / x.size() + 1e-5);
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * t.at(name)[i];
    return y;
  }
  void rope(std::vector<double>& v, int n_heads, int pos) const {
    const int hd = head_dim();
    for (int h = 0; h < n_heads; ++h)
      for (int i = 0; i < hd / 2; ++i) {
        const double theta = pos * std::pow(500.0, -2.0 * i / hd);
        const int a = s.arch == "qwen2" ? h * hd + i : h * hd + 2 * i;
        const int b = s.arch == "qwen2" ? h * hd + i + hd / 2 : h * hd + 2 * i + 1;
        const double x0 = v[a], x1 = v[b];
        v[a] = x0 * std::cos(theta) - x1 * std::sin(theta);
        v[b] = x0 * std::sin(theta) + x1 * std::cos(theta);
      }
  }

  // Logits of every position of one sequence, computed from scratch.
  std::vector<std::vector<double>> reference_logits(const std::vector<int32_t>& toks) const {
    const int hd = head_dim(), n = static_cast<int>(toks.size());
    std::vector<std::vector<double>> x(n);
    for (int i = 0; i < n; ++i)
      x[i].assign(t.at("token_embd.weight").begin() + toks[i] * s.hidden_size,
                  t.at("token_embd.weight").begin() + (toks[i] + 1) * s.hidden_size);
    for (int l = 0; l < s.num_layers; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      std::vector<std::vector<double>> q(n), k(n), v(n);
      for (int i = 0; i < n; ++i) {
        auto h = norm(p + "attn_norm.weight", x[i]);
        q[i] = lin(p + "attn_q.weight", h, s.num_heads * hd);
        k[i] = lin(p + "attn_k.weight", h, s.num_kv_heads * hd);
        v[i] = lin(p + "attn_v.weight", h, s.num_kv_heads * hd);
        if (s.arch == "qwen2") {
          for (size_t j = 0; j < q[i].size(); ++j) q[i][j] += t.at(p + "attn_q.bias")[j];
          for (size_t j = 0; j < k[i].size(); ++j) k[i][j] += t.at(p + "attn_k.bias")[j];
          for (size_t j = 0; j < v[i].size(); ++j) v[i][j] += t.at(p + "attn_v.bias")[j];
        }
        rope(q[i], s.num_heads, i);
        rope(k[i], s.num_kv_heads, i);
      }
      for (int i = 0; i < n; ++i) {
        std::vector<double> att(s.num_heads * hd, 0.0);
        for (int h = 0; h < s.num_heads; ++h) {
          const int kh = h / (s.num_heads / s.num_kv_heads);
          std::vector<double> sc(i + 1);
          double mx = -1e300;
          for (int j = 0; j <= i; ++j) {
            double d = 0;
            for (int e = 0; e < hd; ++e) d += q[i][h * hd + e] * k[j][kh * hd + e];
            sc[j] = d / std::sqrt(double(hd));
            mx = std::max(mx, sc[j]);
          }
          double sum = 0;
          for (auto& z : sc) sum += (z = std::exp(z - mx));
          for (int j = 0; j <= i; ++j)
            for (int e = 0; e < hd; ++e) att[h * hd + e] += sc[j] / sum * v[j][kh * hd + e];
        }
        auto o = lin(p + "attn_output.weight", att, s.hidden_size);
        for (int e = 0; e < s.hidden_size; ++e) x[i][e] += o[e];
        auto h = norm(p + "ffn_norm.weight", x[i]);
        auto g = lin(p + "ffn_gate.weight", h, s.ffn_size);
        auto u = lin(p + "ffn_up.weight", h, s.ffn_size);
        for (int e = 0; e < s.ffn_size; ++e) g[e] = g[e] / (1 + std::exp(-g[e])) * u[e];
        auto d = lin(p + "ffn_down.weight", g, s.hidden_size);
        for (int e = 0; e < s.hidden_size; ++e) x[i][e] += d[e];
      }
    }
    std::vector<std::vector<double>> logits(n);
    for (int i = 0; i < n; ++i) logits[i] = lin("output.weight", norm("output_norm.weight", x[i]), s.vocab_size);
    return logits;
  }
};

// Runs sequences through the engine-style paged path in steps. Each step is a
// list of (sequence index, number of new tokens); returns per-sequence logits
// of every computed position.
class PagedRunner {
 public:
  PagedRunner(RandomModel& m, int block_size, int num_threads, DType kv_dtype = DType::kF32)
      : kv_(64, block_size), pool_(num_threads) {
    auto model = LlamaModel::load(*m.file);
    EXPECT_TRUE(model.is_ok()) << model.status().message();
    model_ = std::move(model).value();
    const auto& c = model_->config();
    storage_ = std::make_unique<KVStorage>(c.num_layers, 64, block_size, c.num_kv_heads, c.head_dim, kv_dtype);
  }

  void step(const std::vector<std::pair<int, int>>& work, const std::vector<std::vector<int32_t>>& seqs,
            std::map<int, std::vector<std::vector<float>>>& out) {
    ForwardBatch b;
    const int bs = kv_.block_size();
    for (auto [si, n_new] : work) {
      int& done = computed_[si];
      ASSERT_TRUE(kv_.allocate_slots(SeqId{si}, done + n_new));
      const auto& table = kv_.block_table(SeqId{si});
      SeqSlice sl{static_cast<int32_t>(b.tokens.size()), n_new, done + n_new, table.data()};
      for (int p = done; p < done + n_new; ++p) {
        b.tokens.push_back(seqs[si][p]);
        b.positions.push_back(p);
        b.slots.push_back(int64_t{table[p / bs].value} * bs + p % bs);
        b.logit_rows.push_back(static_cast<int32_t>(b.tokens.size()) - 1);
      }
      b.seqs.push_back(sl);
      done += n_new;
    }
    const int nv = model_->config().vocab_size;
    std::vector<float> logits(b.logit_rows.size() * nv);
    model_->forward(b, *storage_, pool_, logits.data());
    size_t r = 0;
    for (auto [si, n_new] : work)
      for (int k = 0; k < n_new; ++k, ++r) out[si].emplace_back(logits.begin() + r * nv, logits.begin() + (r + 1) * nv);
  }
  const ThreadPool& pool() const { return pool_; }

 private:
  KVCacheManager kv_;
  ThreadPool pool_;
  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<KVStorage> storage_;
  std::map<int, int> computed_;
};

double max_rel_error(const std::vector<float>& got, const std::vector<double>& want) {
  double scale = 0, err = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, std::abs(want[i]));
    err = std::max(err, std::abs(got[i] - want[i]));
  }
  return err / scale;
}

// Largest relative logit error of every computed position against the
// float64 reference.
double worst_vs_reference(RandomModel& m, const std::vector<std::vector<int32_t>>& seqs,
                          std::map<int, std::vector<std::vector<float>>>& out) {
  double worst = 0;
  for (int i = 0; i < static_cast<int>(seqs.size()); ++i) {
    const auto want = m.reference_logits(seqs[i]);
    EXPECT_EQ(out[i].size(), want.size());
    for (size_t p = 0; p < want.size() && p < out[i].size(); ++p)
      worst = std::max(worst, max_rel_error(out[i][p], want[p]));
  }
  return worst;
}

// Random token sequences of the given lengths.
std::vector<std::vector<int32_t>> random_seqs(std::initializer_list<int> lens, int32_t vocab_size, std::mt19937& rng) {
  std::vector<std::vector<int32_t>> seqs;
  for (int len : lens) {
    seqs.emplace_back();
    for (int k = 0; k < len; ++k) seqs.back().push_back(static_cast<int32_t>(rng() % vocab_size));
  }
  return seqs;
}

class ForwardTest : public ::testing::TestWithParam<Shape> {};

TEST_P(ForwardTest, MixedPrefillAndDecodeMatchFloat64Reference) {
  const uint32_t seed = 1234;
  RandomModel m(GetParam(), seed);
  std::mt19937 rng(seed);
  const auto seqs = random_seqs({23, 9, 14}, GetParam().vocab_size, rng);

  PagedRunner runner(m, /*block_size=*/5, /*num_threads=*/2);
  std::map<int, std::vector<std::vector<float>>> out;
  // Chunked prefill of seq 0 alongside prefill of 1, then decodes of all
  // three mixed with the rest of seq 0 and the prefill of seq 2.
  runner.step({{0, 11}, {1, 7}}, seqs, out);
  runner.step({{1, 1}, {0, 10}, {2, 12}}, seqs, out);
  runner.step({{0, 1}, {1, 1}, {2, 1}}, seqs, out);
  runner.step({{2, 1}, {0, 1}}, seqs, out);

  const double worst = worst_vs_reference(m, seqs, out);
  RecordProperty("max_rel_error", std::to_string(worst));
  EXPECT_LT(worst, 2e-4) << "worst relative logit error " << worst;
}

// Prefills longer than one attention work item (64 query tokens) are cut
// into pieces the threads claim out of order: every position's logits must
// still match the reference (a piece that saw the wrong keys, or wrote
// another piece's rows, would not).
TEST_P(ForwardTest, LongPrefillsCutIntoAttentionPiecesMatchFloat64Reference) {
  const uint32_t seed = 777;
  RandomModel m(GetParam(), seed);
  std::mt19937 rng(seed);
  const auto seqs = random_seqs({150, 131}, GetParam().vocab_size, rng);
  PagedRunner runner(m, /*block_size=*/8, /*num_threads=*/3);
  std::map<int, std::vector<std::vector<float>>> out;
  runner.step({{0, 149}, {1, 65}}, seqs, out);
  runner.step({{1, 66}, {0, 1}}, seqs, out);
  const double worst = worst_vs_reference(m, seqs, out);
  RecordProperty("max_rel_error", std::to_string(worst));
  EXPECT_LT(worst, 2e-4) << "worst relative logit error " << worst;
}

// An f16 KV cache rounds K and V to 11 significant bits: logits stay within
// a few 1e-4 of the float64 reference (f32 cache: < 1e-6).
TEST_P(ForwardTest, F16KVCacheStaysCloseToFloat64Reference) {
  const uint32_t seed = 4321;
  RandomModel m(GetParam(), seed);
  std::mt19937 rng(seed);
  const auto seqs = random_seqs({19, 12}, GetParam().vocab_size, rng);
  PagedRunner runner(m, /*block_size=*/4, /*num_threads=*/2, DType::kF16);
  std::map<int, std::vector<std::vector<float>>> out;
  runner.step({{0, 9}, {1, 12}}, seqs, out);
  runner.step({{0, 9}}, seqs, out);
  runner.step({{0, 1}}, seqs, out);
  const double worst = worst_vs_reference(m, seqs, out);
  RecordProperty("max_rel_error", std::to_string(worst));
  EXPECT_LT(worst, 5e-3) << "worst relative logit error " << worst;
  EXPECT_GT(worst, 1e-7) << "an f16 cache should show its rounding";
}

TEST_P(ForwardTest, BatchingDoesNotChangeLogits) {
  RandomModel m(GetParam(), 99);
  std::mt19937 rng(7);
  std::vector<std::vector<int32_t>> seqs(4);
  for (auto& s : seqs)
    for (int k = 0; k < 13; ++k) s.push_back(rng() % GetParam().vocab_size);
  std::map<int, std::vector<std::vector<float>>> alone, together;
  for (int i = 0; i < 4; ++i) {
    PagedRunner r(m, 4, 1);
    r.step({{i, 13}}, seqs, alone);
  }
  PagedRunner r(m, 4, 2);
  r.step({{0, 5}, {1, 13}, {2, 2}}, seqs, together);
  r.step({{3, 13}, {0, 8}, {2, 11}}, seqs, together);
  for (int i = 0; i < 4; ++i)
    for (int p = 0; p < 13; ++p)
      for (size_t v = 0; v < alone[i][p].size(); ++v)
        ASSERT_NEAR(alone[i][p][v], together[i][p][v], 1e-4f * (1 + std::abs(alone[i][p][v])))
            << "seq " << i << " pos " << p << " vocab " << v;
}

// LlamaModel::set_min_parallel_step_macs: a step under the bound never
// wakes the pool and computes the same logits, bit for bit (a step's way is
// chosen by measured time, so it must not change the output); at 0 every
// step does.
// (This binary runs with 0 otherwise: tests/parallel_every_step.cc.)
TEST(StepThreads, StepsUnderTheBoundRunOnTheCallingThread) {
  RandomModel m(Shape{"llama", 61, 48, 2, 6, 2, 40}, 5);
  std::mt19937 rng(3);
  const auto seqs = random_seqs({40, 40}, 61, rng);
  std::map<int, std::vector<std::vector<float>>> alone, pooled;
  PagedRunner a(m, 4, 2), p(m, 4, 2);
  LlamaModel::set_min_parallel_step_macs(int64_t{1} << 40);
  a.step({{0, 40}, {1, 40}}, seqs, alone);
  EXPECT_EQ(a.pool().jobs(), 0u) << "a step under the bound woke the pool";
  LlamaModel::set_min_parallel_step_macs(0);
  p.step({{0, 40}, {1, 40}}, seqs, pooled);
  EXPECT_GT(p.pool().jobs(), 0u);
  for (int i = 0; i < 2; ++i)
    for (int t = 0; t < 40; ++t)
      for (size_t v = 0; v < alone[i][t].size(); ++v) ASSERT_EQ(alone[i][t][v], pooled[i][t][v]);
}

// By default a small model's steps run the way measured times favor
// (model/step_threads.h): its first steps try both, and the logits are those
// of steps that all ran alone.
TEST(StepThreads, MeasuredStepsTryBothWaysAndComputeTheSame) {
  RandomModel m(Shape{"llama", 61, 48, 2, 6, 2, 40}, 5);
  std::mt19937 rng(4);
  const auto seqs = random_seqs({40, 40, 40, 40, 40, 40}, 61, rng);
  std::map<int, std::vector<std::vector<float>>> alone, measured;
  PagedRunner a(m, 4, 2), p(m, 4, 2);
  LlamaModel::set_min_parallel_step_macs(int64_t{1} << 40);
  for (int i = 0; i < 6; i += 2) a.step({{i, 40}, {i + 1, 40}}, seqs, alone);
  ASSERT_EQ(a.pool().jobs(), 0u);
  // Three steps of one size: alone (untimed), alone, on the pool (the warm-up).
  LlamaModel::set_min_parallel_step_macs(LlamaModel::kMeasureStepThreads);
  for (int i = 0; i < 6; i += 2) p.step({{i, 40}, {i + 1, 40}}, seqs, measured);
  LlamaModel::set_min_parallel_step_macs(0);
  EXPECT_GT(p.pool().jobs(), 0u) << "no step tried the pool";
  for (int i = 0; i < 6; ++i)
    for (int t = 0; t < 40; ++t)
      for (size_t v = 0; v < alone[i][t].size(); ++v)
        ASSERT_EQ(alone[i][t][v], measured[i][t][v]) << "seq " << i << " pos " << t << " vocab " << v;
}

INSTANTIATE_TEST_SUITE_P(Shapes, ForwardTest,
                         ::testing::Values(Shape{"llama", 50, 32, 2, 4, 4, 48},   // MHA
                                           Shape{"llama", 61, 48, 2, 6, 2, 40},   // GQA, head dim 8
                                           Shape{"llama", 37, 40, 3, 4, 1, 24},   // MQA, head dim 10
                                           Shape{"qwen2", 45, 36, 2, 3, 1, 52}),  // biases, neox rope, hd 12
                         [](const auto& info) {
                           return info.param.arch + "_h" + std::to_string(info.param.num_heads) + "_kv" +
                                  std::to_string(info.param.num_kv_heads);
                         });

}  // namespace
}  // namespace pagoda
