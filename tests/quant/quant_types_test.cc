// The tensor-type rules of llama.cpp's mixes (llama_tensor_get_type).
#include "quant/quant_types.h"

#include <gtest/gtest.h>

#include <string>

namespace pagoda::quant {
namespace {

QuantMix mix(const char* name) {
  auto m = parse_quant_mix(name);
  EXPECT_TRUE(m.is_ok()) << m.status().message();
  return *m;
}

std::string blk(int i, const char* t) { return "blk." + std::to_string(i) + "." + t + ".weight"; }

TEST(QuantTypes, ParsesNamesAndAliases) {
  EXPECT_EQ(mix("q4_k_m").name, "Q4_K_M");
  EXPECT_EQ(mix("Q4_K").name, "Q4_K_M");  // llama-quantize's alias
  EXPECT_EQ(mix("q5_k").name, "Q5_K_M");
  EXPECT_EQ(mix("q3_k").name, "Q3_K_M");
  EXPECT_EQ(mix("Q3_K_M").ftype, 12u);
  EXPECT_EQ(mix("iq4_nl").base, DType::kIQ4_NL);
  EXPECT_EQ(mix("Q4_K_M").ftype, 15u);
  EXPECT_EQ(mix("q8_0").ftype, 7u);
  EXPECT_EQ(mix("q6_k").base, DType::kQ6_K);
  EXPECT_EQ(mix("f16").base, DType::kF16);
  auto bad = parse_quant_mix("q7_z");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("unknown quantization type 'q7_z'"), std::string::npos);
  EXPECT_EQ(mix("q2_k").ftype, 10u);
  EXPECT_EQ(mix("Q2_K_S").ftype, 21u);
  EXPECT_EQ(mix("q2_k").base, DType::kQ2_K);
  auto later = parse_quant_mix("iq3_m");
  ASSERT_FALSE(later.is_ok());
  EXPECT_NE(later.status().message().find("not supported yet"), std::string::npos);
}

TEST(QuantTypes, WhichTensorsAreQuantized) {
  EXPECT_TRUE(is_quantizable("blk.0.attn_q.weight", 2));
  EXPECT_TRUE(is_quantizable("token_embd.weight", 2));
  EXPECT_TRUE(is_quantizable("blk.0.ffn_up_exps.weight", 3));
  EXPECT_FALSE(is_quantizable("blk.0.attn_norm.weight", 1));
  EXPECT_FALSE(is_quantizable("blk.0.attn_q_norm.weight", 2));
  EXPECT_FALSE(is_quantizable("blk.0.ffn_gate_inp.weight", 2));  // MoE router
  EXPECT_FALSE(is_quantizable("blk.0.attn_q.bias", 2));
}

TEST(QuantTypes, Q4KMFollowsLlamaCpp) {
  const QuantMix m = mix("Q4_K_M");
  ModelShape s{.num_layers = 32, .has_output = true, .num_experts = 0};
  EXPECT_EQ(tensor_type(m, s, "output.weight", 4096), DType::kQ6_K);
  EXPECT_EQ(tensor_type(m, s, "token_embd.weight", 4096), DType::kQ4_K);
  EXPECT_EQ(tensor_type(m, s, blk(0, "attn_q"), 4096), DType::kQ4_K);
  // use_more_bits(i, 32): i < 4, i >= 28, or (i - 4) % 3 == 2.
  int more = 0;
  for (int i = 0; i < 32; ++i) {
    const bool expect = i < 4 || i >= 28 || (i - 4) % 3 == 2;
    EXPECT_EQ(tensor_type(m, s, blk(i, "attn_v"), 4096), expect ? DType::kQ6_K : DType::kQ4_K) << i;
    EXPECT_EQ(tensor_type(m, s, blk(i, "ffn_down"), 14336), expect ? DType::kQ6_K : DType::kQ4_K) << i;
    more += expect;
  }
  EXPECT_EQ(more, 16);
  EXPECT_EQ(tensor_type(m, s, blk(5, "ffn_gate"), 4096), DType::kQ4_K);
  // Rows that do not fit a K-quant super-block fall back as llama.cpp's.
  EXPECT_EQ(tensor_type(m, s, blk(5, "ffn_gate"), 640), DType::kQ5_0);
  EXPECT_EQ(tensor_type(m, s, blk(0, "ffn_down"), 640), DType::kQ8_0);  // Q6_K -> Q8_0
  EXPECT_EQ(tensor_type(m, s, blk(5, "ffn_gate"), 100), DType::kF16);
  EXPECT_EQ(tensor_type(m, s, "output.weight", 640), DType::kQ8_0);
  // Tied embeddings: token_embd is the output matrix.
  s.has_output = false;
  EXPECT_EQ(tensor_type(m, s, "token_embd.weight", 4096), DType::kQ6_K);
}

TEST(QuantTypes, OtherMixes) {
  ModelShape s{.num_layers = 16, .has_output = true, .num_experts = 0};
  EXPECT_EQ(tensor_type(mix("Q4_0"), s, "output.weight", 2048), DType::kQ6_K);
  EXPECT_EQ(tensor_type(mix("Q4_0"), s, blk(0, "ffn_down"), 2048), DType::kQ4_0);
  EXPECT_EQ(tensor_type(mix("Q8_0"), s, "output.weight", 2048), DType::kQ8_0);
  EXPECT_EQ(tensor_type(mix("Q6_K"), s, blk(3, "attn_v"), 2048), DType::kQ6_K);
  EXPECT_EQ(tensor_type(mix("F16"), s, "output.weight", 2048), DType::kF16);
  EXPECT_EQ(tensor_type(mix("Q4_K_S"), s, blk(3, "attn_v"), 2048), DType::kQ5_K);
  EXPECT_EQ(tensor_type(mix("Q4_K_S"), s, blk(4, "attn_v"), 2048), DType::kQ4_K);
  EXPECT_EQ(tensor_type(mix("Q4_K_S"), s, blk(1, "ffn_down"), 2048), DType::kQ5_K);
  EXPECT_EQ(tensor_type(mix("Q4_K_S"), s, blk(2, "ffn_down"), 2048), DType::kQ4_K);
  EXPECT_EQ(tensor_type(mix("Q5_K_M"), s, blk(0, "attn_v"), 2048), DType::kQ6_K);
  // With an imatrix, Q4_0 guards the first eighth's ffn_down with Q4_1.
  s.has_imatrix = true;
  EXPECT_EQ(tensor_type(mix("Q4_0"), s, blk(1, "ffn_down"), 2048), DType::kQ4_1);
  EXPECT_EQ(tensor_type(mix("Q4_0"), s, blk(2, "ffn_down"), 2048), DType::kQ4_0);
  // Q3_K_M: attn_v Q5_K in the first two layers then Q4_K, attn_output Q4_K,
  // ffn_down Q5_K in the first sixteenth then Q4_K; rows that do not fit
  // fall back to IQ4_NL.
  ModelShape s32{.num_layers = 32, .has_output = true, .num_experts = 0};
  EXPECT_EQ(tensor_type(mix("Q3_K_M"), s32, blk(1, "attn_v"), 2048), DType::kQ5_K);
  EXPECT_EQ(tensor_type(mix("Q3_K_M"), s32, blk(2, "attn_v"), 2048), DType::kQ4_K);
  EXPECT_EQ(tensor_type(mix("Q3_K_M"), s32, blk(2, "attn_output"), 2048), DType::kQ4_K);
  EXPECT_EQ(tensor_type(mix("Q3_K_M"), s32, blk(1, "ffn_down"), 2048), DType::kQ5_K);
  EXPECT_EQ(tensor_type(mix("Q3_K_M"), s32, blk(2, "ffn_down"), 2048), DType::kQ4_K);
  EXPECT_EQ(tensor_type(mix("Q3_K_M"), s32, blk(2, "ffn_up"), 2048), DType::kQ3_K);
  EXPECT_EQ(tensor_type(mix("Q3_K_M"), s32, blk(2, "ffn_up"), 640), DType::kIQ4_NL);
  EXPECT_EQ(tensor_type(mix("Q3_K_L"), s32, blk(2, "ffn_down"), 2048), DType::kQ5_K);
  EXPECT_EQ(tensor_type(mix("Q3_K_S"), s32, blk(2, "attn_v"), 2048), DType::kQ3_K);
  EXPECT_EQ(tensor_type(mix("IQ4_NL"), s32, blk(9, "ffn_up"), 2048), DType::kIQ4_NL);
  EXPECT_EQ(tensor_type(mix("IQ4_NL"), s32, blk(1, "ffn_down"), 2048), DType::kQ5_K);
  EXPECT_EQ(tensor_type(mix("IQ4_NL"), s32, "output.weight", 2048), DType::kQ6_K);
  EXPECT_EQ(tensor_type(mix("IQ4_XS"), s32, blk(9, "ffn_up"), 2048), DType::kIQ4_XS);
  EXPECT_EQ(tensor_type(mix("IQ4_XS"), s32, blk(9, "ffn_up"), 640), DType::kIQ4_NL);
  // Eight experts: attn_v and attn_k get Q8_0.
  s.num_experts = 8;
  EXPECT_EQ(tensor_type(mix("Q4_K_M"), s, blk(9, "attn_k"), 2048), DType::kQ8_0);
}

}  // namespace
}  // namespace pagoda::quant
