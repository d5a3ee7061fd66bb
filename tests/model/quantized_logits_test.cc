// Every weight dtype: a model made from the same underlying weights gives
// logits close to the F32 model, within a per-type tolerance.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <unistd.h>

#include "kv/kv_cache_manager.h"
#include "kv/kv_storage.h"
#include "model/llama_model.h"
#include "model/make_model.h"

namespace pagoda {
namespace {

std::vector<float> logits_for(DType dtype, const std::vector<int32_t>& tokens) {
  MakeModelOptions opts;
  opts.shape = {"llama", 2, 256, 4, 2, 512, 512, 256};
  opts.dtype = dtype;
  opts.seed = 3;
  opts.num_threads = 1;
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("pagoda_qlogits_" + std::string(dtype_name(dtype)) + "_" + std::to_string(::getpid()) + ".gguf"))
                               .string();
  auto plan = make_model(opts, path);
  EXPECT_TRUE(plan.is_ok()) << plan.status().message();
  auto file = gguf::GGUFFile::open(path);
  EXPECT_TRUE(file.is_ok());
  auto model = LlamaModel::load(**file);
  EXPECT_TRUE(model.is_ok()) << model.status().message();
  const auto& c = (*model)->config();
  KVCacheManager kv(16, 16);
  KVStorage storage(c.n_layer, 16, 16, c.n_head_kv, c.head_dim);
  const int n = static_cast<int>(tokens.size());
  EXPECT_TRUE(kv.allocate_slots(SeqId{0}, n));
  ForwardBatch b;
  b.tokens = tokens;
  for (int i = 0; i < n; ++i) {
    b.positions.push_back(i);
    b.slots.push_back(kv.slot_of(SeqId{0}, i));
    b.logit_rows.push_back(i);
  }
  b.seqs.push_back({0, n, n, kv.block_table(SeqId{0}).data()});
  ThreadPool pool(2);
  std::vector<float> logits(static_cast<size_t>(n) * c.n_vocab);
  (*model)->forward(b, storage, pool, logits.data());
  std::filesystem::remove(path);
  return logits;
}

struct Tol {
  DType type;
  double max_rel_rms;  // ||logits - ref|| / ||ref||
};

class QuantizedLogits : public ::testing::TestWithParam<Tol> {};

TEST_P(QuantizedLogits, CloseToF32) {
  const std::vector<int32_t> tokens = {1, 57, 300, 12, 499, 8, 8, 250, 3, 77, 123, 400};
  static const std::vector<float> ref = logits_for(DType::kF32, tokens);
  const auto got = logits_for(GetParam().type, tokens);
  ASSERT_EQ(got.size(), ref.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (got[i] - ref[i]) * double(got[i] - ref[i]);
    den += ref[i] * double(ref[i]);
  }
  const double rel = std::sqrt(num / den);
  std::printf("%-5s relative RMS logit error %.5f\n", std::string(dtype_name(GetParam().type)).c_str(), rel);
  EXPECT_LT(rel, GetParam().max_rel_rms);
  EXPECT_GT(rel, 0.0);  // the dtype really changed the weights
}

INSTANTIATE_TEST_SUITE_P(
    Types, QuantizedLogits,
    // Measured (2026-11-29): f16 0.0008, bf16 0.006, q8_0 0.025, q6_k 0.063,
    // q5_0 0.136, q5_1 0.124, q5_k 0.128, q4_0 0.279, q4_1 0.264, q4_k 0.223.
    // A random model has no structure to protect, so logit error is ~4x the
    // per-weight error; the limits are 1.5x the measurement.
    ::testing::Values(Tol{DType::kF16, 0.002}, Tol{DType::kBF16, 0.01}, Tol{DType::kQ8_0, 0.04},
                      Tol{DType::kQ6_K, 0.095}, Tol{DType::kQ5_0, 0.2}, Tol{DType::kQ5_1, 0.19},
                      Tol{DType::kQ5_K, 0.19}, Tol{DType::kQ4_0, 0.42}, Tol{DType::kQ4_1, 0.4},
                      Tol{DType::kQ4_K, 0.34}),
    [](const auto& info) { return std::string(dtype_name(info.param.type)); });

}  // namespace
}  // namespace pagoda
