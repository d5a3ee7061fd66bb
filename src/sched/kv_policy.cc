#include "sched/kv_policy.h"

#include <algorithm>
#include <string>

namespace pagoda {

std::string_view kv_policy_name(KvPolicyKind kind) {
  switch (kind) {
    case KvPolicyKind::kStreaming: return "streaming";
    case KvPolicyKind::kSnapKv: return "snapkv";
    case KvPolicyKind::kH2o: return "h2o";
    case KvPolicyKind::kFull: break;
  }
  return "full";
}

std::optional<KvPolicyKind> parse_kv_policy_kind(std::string_view name) {
  for (KvPolicyKind k : {KvPolicyKind::kFull, KvPolicyKind::kStreaming, KvPolicyKind::kSnapKv, KvPolicyKind::kH2o})
    if (kv_policy_name(k) == name) return k;
  return std::nullopt;
}

KvPolicy with_default_window(KvPolicy p) {
  if (p.window > 0) return p;
  if (p.streaming()) p.window = 1024;
  if (p.snapkv()) p.window = std::max(1, std::min(32, p.budget / 2));
  if (p.h2o()) p.window = std::max(1, std::min(64, p.budget / 2));
  return p;
}

Status validate_kv_policy(const KvPolicy& p, bool index_sensitive) {
  const std::string name(kv_policy_name(p.kind));
  if (p.streaming() && (p.window < 1 || p.sinks < 0))
    return invalid_argument("KV policy streaming needs a window of at least 1 token and sinks >= 0");
  if (p.snapkv() || p.h2o()) {
    if (p.window < 1 || p.budget <= p.window || (p.snapkv() && p.pool < 1))
      return invalid_argument("KV policy " + name + " needs 1 <= window < budget");
    // Compaction moves a token's K/V to another cache index: windows and
    // sinks that depend on the index would see the wrong tokens.
    if (index_sensitive)
      return invalid_argument("KV policy " + name + " does not support sliding-window or attention-sink models yet");
  }
  return Status::ok();
}

int64_t bounded_kv_tokens(const KvPolicy& p, int32_t block_size) {
  const int64_t bs = block_size;
  if (p.streaming()) return (p.sink_blocks(block_size) + 2) * bs + 2 * int64_t{p.window};
  if (p.h2o()) return 2 * int64_t{p.budget} + 2 * bs;
  return 0;
}

}  // namespace pagoda
