// MHA -> GQA conversion: identity at the same head count, mean-pooled K/V
// heads otherwise, a model that loads and runs, clear errors.
#include "quant/convert_gqa.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "kernels/ref/quant_ref.h"
#include "model/llama_model.h"
#include "quant/calibration.h"
#include "testing/make_model.h"

namespace pagoda::quant {
namespace {

namespace fs = std::filesystem;

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("pagoda_gqa_test_" + std::to_string(::getpid()) + "_" + name)).string();
}

std::string make_mha(DType dtype, const std::string& name) {
  MakeModelOptions o;
  auto cfg = model_preset("tiny-mha");  // 4 heads, 4 KV heads
  EXPECT_TRUE(cfg.is_ok());
  o.config = *cfg;
  o.dtype = dtype;
  const std::string path = temp_path(name);
  EXPECT_TRUE(make_model(o, path).is_ok());
  return path;
}

std::vector<float> rows_of(const gguf::TensorInfo& t) {
  std::vector<float> v(static_cast<size_t>(t.num_elements()));
  const int64_t cols = t.dims[0], rows = t.num_elements() / cols;
  for (int64_t r = 0; r < rows; ++r)
    ref::dequantize_row(t.type, t.data + r * dtype_row_bytes(t.type, cols), &v[r * cols], cols);
  return v;
}

TEST(ConvertGqa, SameHeadCountIsTheIdentity) {
  const std::string in = make_mha(DType::kF32, "in.gguf"), out = temp_path("same.gguf");
  ASSERT_TRUE(convert_kv_heads(in, out, 4).is_ok());
  auto a = gguf::GGUFFile::open(in);
  auto b = gguf::GGUFFile::open(out);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  ASSERT_EQ((*a)->tensors().size(), (*b)->tensors().size());
  for (const auto& t : (*a)->tensors()) {
    const auto* u = (*b)->tensor(t.name);
    ASSERT_NE(u, nullptr) << t.name;
    EXPECT_EQ(u->dims, t.dims);
    ASSERT_EQ(u->num_bytes, t.num_bytes);
    EXPECT_EQ(std::memcmp(u->data, t.data, t.num_bytes), 0) << t.name;
  }
  EXPECT_EQ((*b)->metadata().size(), (*a)->metadata().size());
  fs::remove(in);
  fs::remove(out);
}

TEST(ConvertGqa, PoolsKeyAndValueHeads) {
  for (DType dtype : {DType::kF32, DType::kQ8_0}) {
    const std::string in = make_mha(dtype, "in.gguf"), out = temp_path("gqa.gguf");
    auto r = convert_kv_heads(in, out, 2);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_EQ(r->kv_heads_after, 2);
    auto a = gguf::GGUFFile::open(in);
    auto b = gguf::GGUFFile::open(out);
    ASSERT_TRUE(a.is_ok() && b.is_ok());
    EXPECT_EQ((*b)->get_int("llama.attention.head_count_kv").value_or(0), 2);
    auto cfg = model_config_from_gguf(**b);
    ASSERT_TRUE(cfg.is_ok());
    const int64_t hd = cfg->head_dim;
    for (const char* name : {"blk.0.attn_k.weight", "blk.1.attn_v.weight"}) {
      const auto* t = (*a)->tensor(name);
      const auto* u = (*b)->tensor(name);
      EXPECT_EQ(u->type, t->type);
      EXPECT_EQ(u->dims[1], 2 * hd);
      const std::vector<float> src = rows_of(*t), dst = rows_of(*u);
      const int64_t cols = t->dims[0];
      const float tol = dtype == DType::kF32 ? 1e-6f : 0.02f;
      for (int64_t g = 0; g < 2; ++g)
        for (int64_t d = 0; d < hd; ++d)
          for (int64_t c = 0; c < cols; ++c) {
            const float mean = 0.5f * (src[((2 * g) * hd + d) * cols + c] + src[((2 * g + 1) * hd + d) * cols + c]);
            ASSERT_NEAR(dst[(g * hd + d) * cols + c], mean, tol) << name;
          }
      EXPECT_EQ(std::memcmp((*a)->tensor("blk.0.attn_q.weight")->data, (*b)->tensor("blk.0.attn_q.weight")->data,
                            (*a)->tensor("blk.0.attn_q.weight")->num_bytes),
                0);
    }
    // The converted model loads and runs.
    auto lm = LlamaModel::load(**b);
    ASSERT_TRUE(lm.is_ok()) << lm.status().message();
    EXPECT_EQ((*lm)->config().num_kv_heads, 2);
    CalibrationRun run;
    run.threads = 1;
    EXPECT_TRUE(run_calibration(std::move(*lm), {{1, 2, 3, 4, 5}}, {}, run).is_ok());
    fs::remove(in);
    fs::remove(out);
  }
}

TEST(ConvertGqa, BadInput) {
  const std::string in = make_mha(DType::kF32, "in.gguf");
  auto r = convert_kv_heads(in, temp_path("x.gguf"), 3);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("must divide"), std::string::npos);
  EXPECT_FALSE(convert_kv_heads(in, temp_path("x.gguf"), 0).is_ok());
  EXPECT_FALSE(convert_kv_heads(temp_path("missing.gguf"), temp_path("x.gguf"), 1).is_ok());
  EXPECT_FALSE(fs::exists(temp_path("x.gguf")));
  fs::remove(in);
}

}  // namespace
}  // namespace pagoda::quant
