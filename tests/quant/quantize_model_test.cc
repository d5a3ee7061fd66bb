// `quantize_model` end to end on random-weight models: the types the mix
// rules give, files Pagoda loads and runs, the same bytes for every thread
// count, the importance matrix, GPTQ, and clear errors for bad input.
#include "quant/quantize_model.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "quant/calibration.h"
#include "quant/imatrix.h"
#include "testing/make_model.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::quant {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path dir = fs::temp_directory_path() / ("pagoda_quant_test_" + std::to_string(::getpid()));
  TempDir() { fs::create_directories(dir); }
  ~TempDir() { fs::remove_all(dir); }
  std::string path(const std::string& name) const { return (dir / name).string(); }
};

// A llama model with 256-wide rows (K-quants fit) and the built-in vocabulary.
std::string make_f32_model(const TempDir& tmp, bool tied = false) {
  MakeModelOptions o;
  auto cfg = model_preset("tiny");
  EXPECT_TRUE(cfg.is_ok());
  o.config = *cfg;
  o.config.hidden_size = 256;
  o.config.num_heads = 4;
  o.config.num_kv_heads = 2;
  o.config.ffn_size = 512;
  o.config.num_layers = 4;
  o.tied_embeddings = tied;
  const std::string path = tmp.path(tied ? "tied.gguf" : "f32.gguf");
  auto plan = make_model(o, path);
  EXPECT_TRUE(plan.is_ok()) << plan.status().message();
  return path;
}

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

QuantizeOptions options(const char* type, int threads) {
  QuantizeOptions o;
  auto m = parse_quant_mix(type);
  EXPECT_TRUE(m.is_ok());
  o.mix = *m;
  o.threads = threads;
  return o;
}

// The quantized file loads and runs a forward pass.
void expect_runs(const std::string& path) {
  auto file = gguf::GGUFFile::open(path);
  EXPECT_TRUE(file.is_ok()) << file.status().message();
  auto lm = LlamaModel::load(**file);
  EXPECT_TRUE(lm.is_ok()) << lm.status().message();
  CalibrationRun run;
  run.threads = 1;
  std::vector<std::vector<int32_t>> windows = {{1, 5, 9, 13, 17, 21, 25, 29}};
  EXPECT_TRUE(run_calibration(std::move(*lm), windows, {}, run).is_ok());
}

TEST(QuantizeModel, Q4KMTypesAndDeterminism) {
  TempDir tmp;
  const std::string in = make_f32_model(tmp);
  auto a = quantize_model(in, tmp.path("a.gguf"), options("q4_k_m", 1));
  ASSERT_TRUE(a.is_ok()) << a.status().message();
  auto b = quantize_model(in, tmp.path("b.gguf"), options("q4_k_m", 3));
  ASSERT_TRUE(b.is_ok()) << b.status().message();
  EXPECT_EQ(read_bytes(tmp.path("a.gguf")), read_bytes(tmp.path("b.gguf")));
  auto f = gguf::GGUFFile::open(tmp.path("a.gguf"));
  ASSERT_TRUE(f.is_ok());
  EXPECT_EQ((*f)->tensor("output.weight")->type, DType::kQ6_K);
  EXPECT_EQ((*f)->tensor("token_embd.weight")->type, DType::kQ4_K);
  EXPECT_EQ((*f)->tensor("blk.1.attn_q.weight")->type, DType::kQ4_K);
  // use_more_bits(i, 4): i < 0, i >= 3, or i % 3 == 2: layers 2 and 3.
  EXPECT_EQ((*f)->tensor("blk.0.attn_v.weight")->type, DType::kQ4_K);
  EXPECT_EQ((*f)->tensor("blk.2.attn_v.weight")->type, DType::kQ6_K);
  EXPECT_EQ((*f)->tensor("blk.3.attn_v.weight")->type, DType::kQ6_K);
  EXPECT_EQ((*f)->tensor("blk.2.ffn_down.weight")->type, DType::kQ6_K);
  EXPECT_EQ((*f)->tensor("blk.1.ffn_down.weight")->type, DType::kQ4_K);
  EXPECT_EQ((*f)->tensor("blk.1.attn_norm.weight")->type, DType::kF32);
  EXPECT_EQ((*f)->get_int("general.file_type").value_or(-1), 15);
  EXPECT_EQ((*f)->get_int("general.quantization_version").value_or(-1), 2);
  // The metadata and tokenizer survive.
  auto src = gguf::GGUFFile::open(in);
  ASSERT_TRUE(src.is_ok());
  EXPECT_EQ((*f)->get_string("general.architecture"), (*src)->get_string("general.architecture"));
  ASSERT_NE((*f)->get_string_array("tokenizer.ggml.tokens"), nullptr);
  EXPECT_EQ(*(*f)->get_string_array("tokenizer.ggml.tokens"), *(*src)->get_string_array("tokenizer.ggml.tokens"));
  expect_runs(tmp.path("a.gguf"));
  EXPECT_LT(a->bytes_out * 5, a->bytes_in);
}

TEST(QuantizeModel, TiedEmbeddingsGetTheOutputType) {
  TempDir tmp;
  const std::string in = make_f32_model(tmp, true);
  ASSERT_TRUE(quantize_model(in, tmp.path("q.gguf"), options("q4_0", 2)).is_ok());
  auto f = gguf::GGUFFile::open(tmp.path("q.gguf"));
  ASSERT_TRUE(f.is_ok());
  EXPECT_EQ((*f)->tensor("token_embd.weight")->type, DType::kQ6_K);
  EXPECT_EQ((*f)->tensor("blk.0.ffn_down.weight")->type, DType::kQ4_0);
}

TEST(QuantizeModel, ImatrixAndGptqRunAndAreDeterministic) {
  TempDir tmp;
  const std::string in = make_f32_model(tmp);
  auto file = gguf::GGUFFile::open(in);
  ASSERT_TRUE(file.is_ok());
  auto tok = Tokenizer::from_gguf(**file);
  ASSERT_TRUE(tok.is_ok());
  std::string text;
  for (int i = 0; i < 60; ++i) text += "the quick brown fox " + std::to_string(i * 7) + " jumps over the lazy dog. ";
  // The importance matrix: collected, saved, loaded.
  auto windows = calibration_windows(**tok, text, 64, 4);
  ASSERT_TRUE(windows.is_ok()) << windows.status().message();
  Imatrix im;
  im.chunk_size = 64;
  im.chunk_count = static_cast<int32_t>(windows->size());
  auto lm = LlamaModel::load(**file);
  ASSERT_TRUE(lm.is_ok());
  CalibrationRun run;
  run.observe_output = true;
  ASSERT_TRUE(run_calibration(std::move(*lm), *windows, im.observer(true), run).is_ok());
  EXPECT_EQ(im.entries.size(), 4u * 7u + 1u);
  EXPECT_EQ(im.entries["blk.0.attn_q.weight"].count, 64.0 * static_cast<double>(windows->size()));
  EXPECT_EQ(im.entries["blk.0.attn_q.weight"].sum2, im.entries["blk.0.attn_v.weight"].sum2);
  EXPECT_EQ(im.entries["blk.0.ffn_down.weight"].sum2.size(), 512u);
  ASSERT_TRUE(im.save(tmp.path("im.gguf")).is_ok());
  auto loaded = Imatrix::load(tmp.path("im.gguf"));
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
  EXPECT_EQ(loaded->entries.size(), im.entries.size());
  EXPECT_EQ(loaded->entries["blk.3.ffn_up.weight"].sum2, im.entries["blk.3.ffn_up.weight"].sum2);
  EXPECT_TRUE(loaded->check_against(**file).is_ok());

  QuantizeOptions o = options("q4_0", 1);
  o.imatrix_path = tmp.path("im.gguf");
  ASSERT_TRUE(quantize_model(in, tmp.path("i.gguf"), o).is_ok());
  expect_runs(tmp.path("i.gguf"));
  o.method = Method::kGptq;
  o.calib_text = text;
  o.calib_ctx = 64;
  o.calib_windows = 4;
  auto g1 = quantize_model(in, tmp.path("g1.gguf"), o);
  ASSERT_TRUE(g1.is_ok()) << g1.status().message();
  EXPECT_EQ(g1->num_gptq, 4 * 7);
  o.threads = 3;
  ASSERT_TRUE(quantize_model(in, tmp.path("g3.gguf"), o).is_ok());
  EXPECT_EQ(read_bytes(tmp.path("g1.gguf")), read_bytes(tmp.path("g3.gguf")));
  EXPECT_NE(read_bytes(tmp.path("g1.gguf")), read_bytes(tmp.path("i.gguf")));
  expect_runs(tmp.path("g1.gguf"));
}

TEST(QuantizeModel, BadInputGivesClearErrors) {
  TempDir tmp;
  const std::string in = make_f32_model(tmp);
  // Not a GGUF / truncated.
  {
    std::ofstream(tmp.path("junk.gguf")) << "not a model";
    auto r = quantize_model(tmp.path("junk.gguf"), tmp.path("o.gguf"), options("q8_0", 1));
    ASSERT_FALSE(r.is_ok());
    const std::string bytes = read_bytes(in);
    std::ofstream(tmp.path("trunc.gguf"), std::ios::binary) << bytes.substr(0, bytes.size() / 2);
    r = quantize_model(tmp.path("trunc.gguf"), tmp.path("o.gguf"), options("q8_0", 1));
    ASSERT_FALSE(r.is_ok());
    EXPECT_FALSE(r.status().message().empty());
  }
  // An architecture Pagoda cannot run.
  {
    gguf::GGUFWriter w;
    w.set("general.architecture", gguf::Value::make_string("rwkv9"));
    ASSERT_TRUE(w.write(tmp.path("arch.gguf")).is_ok());
    auto r = quantize_model(tmp.path("arch.gguf"), tmp.path("o.gguf"), options("q8_0", 1));
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("rwkv9"), std::string::npos) << r.status().message();
  }
  // An imatrix made for another model.
  {
    Imatrix im;
    im.entries["blk.0.attn_q.weight"] = {std::vector<float>(100, 1.0f), 10};
    ASSERT_TRUE(im.save(tmp.path("other.gguf")).is_ok());
    QuantizeOptions o = options("q4_0", 1);
    o.imatrix_path = tmp.path("other.gguf");
    auto r = quantize_model(in, tmp.path("o.gguf"), o);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("another model"), std::string::npos) << r.status().message();
    im.entries.clear();
    im.entries["blk.9.attn_q.weight"] = {std::vector<float>(256, 1.0f), 10};
    ASSERT_TRUE(im.save(tmp.path("other.gguf")).is_ok());
    r = quantize_model(in, tmp.path("o.gguf"), o);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("another model"), std::string::npos) << r.status().message();
    // A model file is not an imatrix.
    o.imatrix_path = in;
    r = quantize_model(in, tmp.path("o.gguf"), o);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("not an imatrix"), std::string::npos) << r.status().message();
  }
  // GPTQ without calibration text, or with too little.
  {
    QuantizeOptions o = options("q4_0", 1);
    o.method = Method::kGptq;
    EXPECT_FALSE(quantize_model(in, tmp.path("o.gguf"), o).is_ok());
    o.calib_text = "hi";
    o.calib_ctx = 64;
    auto r = quantize_model(in, tmp.path("o.gguf"), o);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("fewer than one window"), std::string::npos) << r.status().message();
  }
  EXPECT_FALSE(fs::exists(tmp.path("o.gguf")));
}

}  // namespace
}  // namespace pagoda::quant
