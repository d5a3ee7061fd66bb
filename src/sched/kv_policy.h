// Which tokens a sequence keeps in the KV cache. The server has a default
// (--kv-policy and its flags); a request may carry its own (`kv_policy`).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "core/status.h"

namespace pagoda {

enum class KvPolicyKind : uint8_t {
  kFull,  // every token
  // StreamingLLM (Xiao et al. 2023): the first `sinks` tokens (the attention
  // sinks, rounded up to whole blocks) and at least the last `window` tokens
  // before each new one; the blocks between are dropped as the sequence
  // grows and the later keys re-rotated to their new cache positions, so
  // memory stays bounded and positions stay inside the trained context
  // however long it runs. A step computes at most `window` new tokens.
  kStreaming,
  // SnapKV (Li et al. 2024): when the prompt is computed, each KV head of
  // each layer keeps `budget` of its positions: the last `window` (the
  // observation window) and those the window's queries attend to most
  // (votes max-pooled over `pool` neighbours). Tokens keep their positions;
  // decode then appends normally. The step that ends a prompt computes at
  // least `window` tokens, so the window's queries are at hand.
  kSnapKv,
  // H2O (Zhang et al. 2023, "Heavy-Hitter Oracle"): every KV head of every
  // layer accumulates the attention each cached token receives; when the
  // cache reaches budget + one block, each head keeps its last `window`
  // tokens and the budget - window others with the most accumulated
  // attention (a block's worth evicted at once). Tokens keep their positions.
  kH2o,
};

struct KvPolicy {
  KvPolicyKind kind = KvPolicyKind::kFull;
  int32_t sinks = 4;      // streaming: tokens kept from the start
  int32_t window = 0;     // see KvPolicyKind; 0 before with_default_window()
  int32_t budget = 1024;  // snapkv, h2o: tokens per KV head kept
  int32_t pool = 7;       // snapkv: max-pooling width over the votes

  bool full() const { return kind == KvPolicyKind::kFull; }
  bool streaming() const { return kind == KvPolicyKind::kStreaming; }
  bool snapkv() const { return kind == KvPolicyKind::kSnapKv; }
  bool h2o() const { return kind == KvPolicyKind::kH2o; }
  // The cache of such a sequence never outgrows a fixed size (streaming,
  // H2O): neither the pool nor (streaming) the context limits its length.
  bool bounded() const { return streaming() || h2o(); }
  // Streaming's sinks in whole blocks.
  int32_t sink_blocks(int32_t block_size) const { return (sinks + block_size - 1) / block_size; }
  bool operator==(const KvPolicy&) const = default;
};

// A request's own policy (its `kv_policy` field): the kind, and the numbers
// it sets; the others come from the server (Engine::resolve_kv_policy).
struct KvPolicyRequest {
  KvPolicyKind kind = KvPolicyKind::kFull;
  std::optional<int32_t> sinks, window, budget;
};

// "full", "streaming", "snapkv", "h2o".
std::string_view kv_policy_name(KvPolicyKind kind);
std::optional<KvPolicyKind> parse_kv_policy_kind(std::string_view name);

// A window of 0 becomes the policy's default: streaming 1024; SnapKV 32 and
// H2O 64, at most half the budget.
KvPolicy with_default_window(KvPolicy p);

// Checks a policy's numbers (windows below budgets and the like), and that
// SnapKV/H2O do not meet a model whose attention depends on a row's cache
// index (`index_sensitive`: sliding windows, attention sinks).
Status validate_kv_policy(const KvPolicy& p, bool index_sensitive);

// KV tokens one sequence under a bounded policy may hold at once: streaming
// keeps its sinks, a window before the new tokens and a step of new ones (at
// most a window); H2O its budget plus a block and a step of at most the
// budget; each rounded up to blocks. 0 for unbounded policies.
int64_t bounded_kv_tokens(const KvPolicy& p, int32_t block_size);

}  // namespace pagoda
