#include "testing/make_model.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <unordered_map>

#include "../build_kind.h"
#include "../shared_files.h"
#include "gguf/gguf_file.h"
#include "kernels/ref/quant_ref.h"
#include "testing/builtin_vocab.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;

class MakeModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("pagoda_make_model_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  static MakeModelOptions tiny(DType dtype, uint64_t seed = 42) {
    MakeModelOptions o;
    o.config = model_preset("tiny").value();
    o.dtype = dtype;
    o.seed = seed;
    return o;
  }

  std::unique_ptr<gguf::GGUFFile> make_and_open(const MakeModelOptions& o, const std::string& name) {
    auto plan = make_model(o, path(name));
    EXPECT_TRUE(plan.is_ok()) << plan.status().message();
    auto f = gguf::GGUFFile::open(path(name));
    EXPECT_TRUE(f.is_ok()) << f.status().message();
    return f.is_ok() ? std::move(f).value() : nullptr;
  }

  fs::path dir_;
};

std::string read_bytes(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Mean and standard deviation of a whole tensor, dequantized.
std::pair<double, double> tensor_stats(const gguf::TensorInfo& t) {
  const int64_t row = t.dims[0], rows = t.num_elements() / row;
  const size_t row_bytes = dtype_row_bytes(t.type, row);
  std::vector<float> buf(static_cast<size_t>(row));
  double sum = 0, sq = 0;
  for (int64_t r = 0; r < rows; ++r) {
    ref::dequantize_row(t.type, t.data + row_bytes * r, buf.data(), row);
    for (float x : buf) sum += x, sq += double(x) * x;
  }
  const double n = double(t.num_elements()), mean = sum / n;
  return {mean, std::sqrt(std::max(0.0, sq / n - mean * mean))};
}

TEST(MakeModelConfig, PresetsAndDTypes) {
  auto t = model_preset("tinyllama-1.1b");
  ASSERT_TRUE(t.is_ok());
  EXPECT_EQ(t->hidden_size, 2048);
  EXPECT_EQ(t->num_layers, 22);
  EXPECT_EQ(t->num_kv_heads, 4);
  EXPECT_EQ(t->ffn_size, 5632);
  auto bad = model_preset("huge");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("tiny-mha"), std::string::npos) << bad.status().message();

  EXPECT_EQ(make_model_dtype("Q4_K").value(), DType::kQ4_K);
  EXPECT_EQ(make_model_dtype("bf16").value(), DType::kBF16);
  EXPECT_EQ(make_model_dtype("q2_k").value(), DType::kQ2_K);
  EXPECT_FALSE(make_model_dtype("iq2_xs").is_ok());
  EXPECT_FALSE(make_model_dtype("int4").is_ok());
  EXPECT_EQ(llama_file_type(DType::kQ4_K), 15u);
  EXPECT_EQ(llama_file_type(DType::kBF16), 32u);

  ModelConfig s = model_preset("tiny").value();
  EXPECT_FALSE(set_model_arch(&s, "gpt2").is_ok());
  ASSERT_TRUE(set_model_arch(&s, "qwen2").is_ok());
  EXPECT_EQ(s.rms_eps, 1e-6f);
  EXPECT_TRUE(s.has_qkv_bias);
}

TEST(MakeModelConfig, RejectsBadShapes) {
  ModelConfig s = model_preset("tiny").value();
  s.num_kv_heads = 3;  // 4 % 3 != 0
  EXPECT_FALSE(plan_model(s, DType::kF32, false).is_ok());
  s = model_preset("tiny").value();
  s.num_heads = 5;  // 64 % 5 != 0
  EXPECT_FALSE(plan_model(s, DType::kF32, false).is_ok());
  s = model_preset("tiny").value();
  s.num_layers = 0;
  EXPECT_FALSE(plan_model(s, DType::kF32, false).is_ok());
  s = model_preset("tiny").value();
  s.hidden_size = 60;  // head dim 15 is odd
  EXPECT_FALSE(plan_model(s, DType::kF32, false).is_ok());
}

TEST(MakeModelConfig, TypeRulesAndFallbacks) {
  ModelConfig s = model_preset("tiny").value();
  s.hidden_size = 256;
  s.ffn_size = 640;  // not a multiple of 256: ffn_down falls back
  auto plan = plan_model(s, DType::kQ4_K, false);
  ASSERT_TRUE(plan.is_ok());
  std::map<std::string, DType> types;
  for (const auto& t : plan->tensors) types[t.name] = t.type;
  EXPECT_EQ(types["token_embd.weight"], DType::kQ4_K);
  EXPECT_EQ(types["output.weight"], DType::kQ6_K);
  EXPECT_EQ(types["blk.1.attn_q.weight"], DType::kQ4_K);
  EXPECT_EQ(types["blk.1.ffn_up.weight"], DType::kQ4_K);
  EXPECT_EQ(types["blk.1.ffn_down.weight"], DType::kQ8_0);
  EXPECT_EQ(types["blk.1.ffn_norm.weight"], DType::kF32);
  ASSERT_EQ(plan->notes.size(), 1u);
  EXPECT_NE(plan->notes[0].find("ffn_down.weight"), std::string::npos) << plan->notes[0];
  EXPECT_NE(plan->notes[0].find("2 tensors"), std::string::npos) << plan->notes[0];

  auto q8 = plan_model(s, DType::kQ8_0, false);
  for (const auto& t : q8->tensors) {
    if (t.dims.size() == 2) {
      EXPECT_EQ(t.type, DType::kQ8_0) << t.name;
    }
  }
  EXPECT_TRUE(q8->notes.empty());

  s.hidden_size = 48;  // rows of 48: not a multiple of 32 either -> f16
  s.num_heads = 4;
  auto q4 = plan_model(s, DType::kQ4_0, true);
  ASSERT_TRUE(q4.is_ok());
  for (const auto& t : q4->tensors) {
    EXPECT_NE(t.name, "output.weight");
    if (t.name == "blk.0.attn_q.weight") {
      EXPECT_EQ(t.type, DType::kF16);
    }
    if (t.name == "blk.0.ffn_down.weight") {
      EXPECT_EQ(t.type, DType::kQ4_0);  // rows of 640
    }
  }
}

TEST_F(MakeModelTest, TinyInEveryDType) {
  const DType types[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1,
                         DType::kQ5_0, DType::kQ5_1, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};
  for (DType dt : types) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    auto f = make_and_open(tiny(dt), std::string(dtype_name(dt)) + ".gguf");
    ASSERT_TRUE(f);
    EXPECT_EQ(f->get_string("general.architecture"), "llama");
    EXPECT_EQ(f->get_int("general.file_type"), llama_file_type(dt));
    EXPECT_EQ(f->get_int("llama.block_count"), 2);
    EXPECT_EQ(f->get_int("llama.embedding_length"), 64);
    EXPECT_EQ(f->get_int("llama.attention.head_count"), 4);
    EXPECT_EQ(f->get_int("llama.attention.head_count_kv"), 2);
    EXPECT_EQ(f->get_int("llama.feed_forward_length"), 128);
    EXPECT_EQ(f->get_int("llama.context_length"), 512);
    EXPECT_EQ(f->get_int("llama.rope.dimension_count"), 16);
    EXPECT_EQ(f->get_int("llama.vocab_size"), 512);
    EXPECT_NEAR(f->get_float("llama.rope.freq_base").value_or(0), 10000.0, 1e-3);
    EXPECT_NEAR(f->get_float("llama.attention.layer_norm_rms_epsilon").value_or(0), 1e-5, 1e-9);
    ASSERT_EQ(f->tensors().size(), 2u + 9u * 2u + 1u);

    // Rows of 64 and 128 cannot hold 256-blocks: K-quants become q8_0.
    const DType weight = dtype_block_size(dt) == kQK_K ? DType::kQ8_0 : dt;
    const DType out = (dt == DType::kF32 || dt == DType::kF16 || dt == DType::kBF16 || dt == DType::kQ8_0)
                          ? dt
                          : DType::kQ8_0;  // q6_k wanted, rows of 64
    const auto* emb = f->tensor("token_embd.weight");
    ASSERT_TRUE(emb);
    EXPECT_EQ(emb->dims, (std::vector<int64_t>{64, 512}));
    EXPECT_EQ(emb->type, weight);
    const auto* q = f->tensor("blk.1.attn_q.weight");
    ASSERT_TRUE(q);
    EXPECT_EQ(q->dims, (std::vector<int64_t>{64, 64}));
    EXPECT_EQ(q->type, weight);
    EXPECT_EQ(f->tensor("blk.0.attn_k.weight")->dims, (std::vector<int64_t>{64, 32}));
    EXPECT_EQ(f->tensor("blk.0.attn_v.weight")->dims, (std::vector<int64_t>{64, 32}));
    EXPECT_EQ(f->tensor("blk.0.attn_output.weight")->dims, (std::vector<int64_t>{64, 64}));
    EXPECT_EQ(f->tensor("blk.0.ffn_gate.weight")->dims, (std::vector<int64_t>{64, 128}));
    EXPECT_EQ(f->tensor("blk.0.ffn_up.weight")->dims, (std::vector<int64_t>{64, 128}));
    EXPECT_EQ(f->tensor("blk.0.ffn_down.weight")->dims, (std::vector<int64_t>{128, 64}));
    EXPECT_EQ(f->tensor("blk.0.ffn_down.weight")->type, weight);
    EXPECT_EQ(f->tensor("blk.1.attn_norm.weight")->type, DType::kF32);
    EXPECT_EQ(f->tensor("output_norm.weight")->dims, (std::vector<int64_t>{64}));
    const auto* o = f->tensor("output.weight");
    ASSERT_TRUE(o);
    EXPECT_EQ(o->dims, (std::vector<int64_t>{64, 512}));
    EXPECT_EQ(o->type, out);

    // The weights have the intended scale after quantization.
    auto [qm, qs] = tensor_stats(*q);
    EXPECT_NEAR(qm, 0.0, 0.02);
    EXPECT_NEAR(qs, 1.0 / 8.0, 0.125 * 0.1);
    auto [em, es] = tensor_stats(*emb);
    EXPECT_NEAR(es, 0.02, 0.002);
    auto [nm, ns] = tensor_stats(*f->tensor("blk.0.ffn_norm.weight"));
    EXPECT_NEAR(nm, 1.0, 0.01);
    EXPECT_GT(ns, 0.005);
    EXPECT_LT(ns, 0.05);
  }
}

TEST_F(MakeModelTest, KQuantsWhenRowsFit) {
  MakeModelOptions o = tiny(DType::kQ5_K);
  o.config.hidden_size = 256;
  o.config.ffn_size = 512;
  o.config.vocab_size = 300;
  auto f = make_and_open(o, "k.gguf");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->tensor("blk.0.ffn_down.weight")->type, DType::kQ5_K);
  EXPECT_EQ(f->tensor("token_embd.weight")->type, DType::kQ5_K);
  EXPECT_EQ(f->tensor("output.weight")->type, DType::kQ6_K);
  EXPECT_EQ(f->tensor("output.weight")->dims, (std::vector<int64_t>{256, 300}));
  EXPECT_EQ(f->get_string_array("tokenizer.ggml.tokens")->size(), 300u);
  auto [m, s] = tensor_stats(*f->tensor("blk.0.ffn_down.weight"));
  // ffn_down: 1/sqrt(ffn_size) / sqrt(2 * num_layers)
  EXPECT_NEAR(s, 1.0 / std::sqrt(512.0) / 2.0, 0.1 / std::sqrt(512.0) / 2.0);
}

TEST_F(MakeModelTest, DeterministicFromSeedAndThreadCount) {
  MakeModelOptions a = tiny(DType::kQ4_0, 7);
  a.num_threads = 1;
  MakeModelOptions b = a;
  b.num_threads = 3;
  MakeModelOptions c = a;
  c.seed = 8;
  ASSERT_TRUE(make_model(a, path("a.gguf")).is_ok());
  ASSERT_TRUE(make_model(b, path("b.gguf")).is_ok());
  ASSERT_TRUE(make_model(c, path("c.gguf")).is_ok());
  const std::string ba = read_bytes(path("a.gguf")), bb = read_bytes(path("b.gguf")), bc = read_bytes(path("c.gguf"));
  ASSERT_GT(ba.size(), 10000u);
  EXPECT_TRUE(ba == bb);
  EXPECT_EQ(ba.size(), bc.size());
  EXPECT_FALSE(ba == bc);
}

TEST_F(MakeModelTest, Qwen2AndTied) {
  MakeModelOptions o = tiny(DType::kF16);
  ASSERT_TRUE(set_model_arch(&o.config, "qwen2").is_ok());
  o.tied_embeddings = true;
  auto f = make_and_open(o, "qwen.gguf");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->get_string("general.architecture"), "qwen2");
  EXPECT_EQ(f->get_int("qwen2.block_count"), 2);
  EXPECT_NEAR(f->get_float("qwen2.attention.layer_norm_rms_epsilon").value_or(0), 1e-6, 1e-10);
  EXPECT_EQ(f->tensor("output.weight"), nullptr);
  ASSERT_TRUE(f->tensor("blk.1.attn_k.bias"));
  EXPECT_EQ(f->tensor("blk.1.attn_k.bias")->dims, (std::vector<int64_t>{32}));
  EXPECT_EQ(f->tensor("blk.1.attn_q.bias")->type, DType::kF32);
  EXPECT_EQ(f->tensors().size(), 2u + 12u * 2u);
}

TEST_F(MakeModelTest, VocabFromCopiesTokenizer) {
  PAGODA_SKIP_WITHOUT_SHARED("models/stories260K.gguf");
  const std::string src = std::string(PAGODA_SHARED_DIR) + "/models/stories260K.gguf";
  auto ref = gguf::GGUFFile::open(src);
  ASSERT_TRUE(ref.is_ok()) << ref.status().message();
  MakeModelOptions o = tiny(DType::kQ8_0);
  o.config.vocab_size = 1000;  // overridden by the file
  o.vocab_from = src;
  auto f = make_and_open(o, "v.gguf");
  ASSERT_TRUE(f);
  int copied = 0;
  for (const auto& [key, value] : (*ref)->metadata()) {
    if (key.rfind("tokenizer.", 0) != 0) continue;
    ++copied;
    const auto* got = f->find(key);
    ASSERT_TRUE(got) << key;
    EXPECT_EQ(got->type, value.type) << key;
    EXPECT_EQ(got->s, value.s) << key;
    EXPECT_EQ(got->i, value.i) << key;
    EXPECT_EQ(got->strs, value.strs) << key;
    EXPECT_EQ(got->ints, value.ints) << key;
    EXPECT_EQ(got->floats, value.floats) << key;
  }
  EXPECT_GE(copied, 3);
  const size_t n = (*ref)->get_string_array("tokenizer.ggml.tokens")->size();
  EXPECT_EQ(f->get_int("llama.vocab_size"), static_cast<int64_t>(n));
  EXPECT_EQ(f->tensor("token_embd.weight")->dims[1], static_cast<int64_t>(n));

  o.vocab_from = path("missing.gguf");
  EXPECT_FALSE(make_model(o, path("v2.gguf")).is_ok());
}

TEST_F(MakeModelTest, ClearErrors) {
  MakeModelOptions o = tiny(DType::kF32);
  auto r = make_model(o, path("no/such/dir/x.gguf"));
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("cannot write"), std::string::npos) << r.status().message();
  r = make_model(o, dir_.string());
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("directory"), std::string::npos) << r.status().message();
  o.config.vocab_size = 100;  // below 3 specials + 256 bytes
  r = make_model(o, path("x.gguf"));
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("259"), std::string::npos) << r.status().message();
  EXPECT_FALSE(fs::exists(path("x.gguf")));
}

// Independent string-level BPE over the GGUF token strings.
std::vector<std::string> utf8_chars(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = s[i];
    const size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

std::vector<std::string> bpe(const std::string& text, const std::unordered_map<std::string, int>& ranks) {
  std::vector<std::string> sym = utf8_chars(text);
  while (sym.size() > 1) {
    int best = INT32_MAX;
    size_t pos = 0;
    for (size_t k = 0; k + 1 < sym.size(); ++k) {
      auto it = ranks.find(sym[k] + " " + sym[k + 1]);
      if (it != ranks.end() && it->second < best) best = it->second, pos = k;
    }
    if (best == INT32_MAX) break;
    sym[pos] += sym[pos + 1];
    sym.erase(sym.begin() + pos + 1);
  }
  return sym;
}

void check_vocab(const BuiltinVocab& v, int64_t vocab_size) {
  ASSERT_EQ(static_cast<int64_t>(v.tokens.size()), vocab_size);
  ASSERT_EQ(v.token_types.size(), v.tokens.size());
  ASSERT_EQ(static_cast<int64_t>(v.merges.size()), vocab_size - kBuiltinVocabMinSize);
  EXPECT_EQ(v.tokens[v.bos_id], "<s>");
  EXPECT_EQ(v.token_types[v.bos_id], 3);
  EXPECT_EQ(v.token_types[v.eos_id], 3);
  std::set<std::string> unique(v.tokens.begin(), v.tokens.end());
  EXPECT_EQ(unique.size(), v.tokens.size());
  for (int b = 0; b < 256; ++b) EXPECT_EQ(v.tokens[kBuiltinVocabFirstByte + b], gpt2_byte_to_unicode(b));
  EXPECT_EQ(gpt2_byte_to_unicode(' '), "\xC4\xA0");  // "Ġ"
  EXPECT_EQ(gpt2_byte_to_unicode('a'), "a");
  std::unordered_map<std::string, int> ranks;
  for (size_t k = 0; k < v.merges.size(); ++k) {
    const std::string& m = v.merges[k];
    const size_t sp = m.find(' ');
    ASSERT_NE(sp, std::string::npos) << m;
    ASSERT_EQ(m.find(' ', sp + 1), std::string::npos) << m;
    const std::string l = m.substr(0, sp), r = m.substr(sp + 1);
    EXPECT_TRUE(unique.count(l)) << m;
    EXPECT_TRUE(unique.count(r)) << m;
    EXPECT_EQ(v.tokens[kBuiltinVocabMinSize + k], l + r) << m;
    ranks.emplace(m, static_cast<int>(k));
  }
  // Every non-special token is what BPE makes of its own text.
  for (size_t id = kBuiltinVocabFirstByte; id < v.tokens.size(); ++id) {
    const auto pieces = bpe(v.tokens[id], ranks);
    ASSERT_EQ(pieces.size(), 1u) << "token " << id << " '" << v.tokens[id] << "' is unreachable";
  }
}

TEST(BuiltinVocab, SmallSizesAreValid) {
  for (int64_t n : {259, 260, 512, 3001}) {
    SCOPED_TRACE(n);
    auto v = make_builtin_vocab(n);
    ASSERT_TRUE(v.is_ok()) << v.status().message();
    check_vocab(*v, n);
  }
  // The first merges come from English text.
  auto v = make_builtin_vocab(512).value();
  std::set<std::string> t(v.tokens.begin(), v.tokens.end());
  EXPECT_TRUE(t.count("Ġthe")) << "expected a learned ' the'";
  EXPECT_FALSE(make_builtin_vocab(258).is_ok());
}

TEST(BuiltinVocab, LargeVocabIsFastAndValid) {
  const auto start = std::chrono::steady_clock::now();
  auto v = make_builtin_vocab(32000);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(v.is_ok());
  EXPECT_LT(secs, 2.0 * testing_util::kTimeScale);
  check_vocab(*v, 32000);
  auto again = make_builtin_vocab(32000);
  EXPECT_EQ(again->tokens, v->tokens);
  EXPECT_EQ(again->merges, v->merges);
}

}  // namespace
}  // namespace pagoda
