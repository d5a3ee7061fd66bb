// MHA -> GQA/MQA conversion (Ainslie et al. 2023): the key and value heads
// of each group are mean-pooled into one; queries and the output matrix are
// unchanged. The result has fewer KV heads (a smaller KV cache per token)
// and is usually up-trained briefly to recover quality (tools/train).
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace pagoda::quant {

struct ConvertReport {
  int32_t kv_heads_before = 0, kv_heads_after = 0, num_layers = 0;
};

// Writes `in` with num_kv_heads = kv_heads: attn_k/attn_v rows (and
// biases) of each group of head_count_kv / kv_heads heads averaged. Weights
// keep their type (re-quantized when block-quantized). kv_heads must divide
// the current KV head count; equal to it, the file is copied unchanged.
Result<ConvertReport> convert_kv_heads(const std::string& in_path, const std::string& out_path, int32_t kv_heads);

}  // namespace pagoda::quant
