// What `pagoda quantize TYPE` means: a plain weight type or one of
// llama.cpp's mixes (Q4_K_M: most matrices Q4_K, some Q6_K), and the rule
// that picks each tensor's type — the same rules as llama.cpp's
// llama_tensor_get_type, so our files have the same tensor types and sizes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/dtype.h"
#include "core/status.h"

namespace pagoda::quant {

struct QuantMix {
  std::string name;  // upper case, as llama.cpp prints it: "Q4_K_M"
  uint32_t ftype;    // llama.cpp's LLAMA_FTYPE_* value, written as general.file_type
  DType base;        // the type of the matrices no rule changes
};

// "q4_k_m", "Q4_K_M", "q8_0", "f16", "q4_k" (= Q4_K_M, as llama-quantize), ...
// A clear error for a name we know but cannot write yet (Q2_K, Q3_K_*, IQ*).
Result<QuantMix> parse_quant_mix(std::string_view name);
// The accepted names, for --help and errors.
std::string quant_mix_names();

// Model facts the rules use.
struct ModelShape {
  int32_t num_layers = 0;
  bool has_output = true;  // false: tied embeddings, token_embd is the output matrix
  int32_t num_experts = 0;
  bool has_imatrix = false;  // Q4_0/Q5_0 then give the first eighth's ffn_down Q4_1/Q5_1
  int32_t gqa = 1;           // query heads per KV head
};

// Whether llama.cpp would quantize this tensor at all: 2-D (or 3-D expert)
// "*weight" tensors except norms and MoE routers. Others are copied as is.
bool is_quantizable(std::string_view name, int num_dims);

// The type of a quantizable tensor `name` whose rows are `row_len` long.
// Layer-dependent rules read the layer from the name ("blk.N."). Types the
// row length does not fit fall back as llama.cpp's do (Q4_K -> Q5_0,
// Q5_K -> Q5_1, Q6_K -> Q8_0, then F16).
DType tensor_type(const QuantMix& mix, const ModelShape& shape, std::string_view name, int64_t row_len);

}  // namespace pagoda::quant
