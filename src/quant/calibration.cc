#include "quant/calibration.h"

#include <algorithm>

#include "engine/model_runner.h"
#include "kv/kv_cache_manager.h"
#include "sched/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::quant {

Result<std::vector<std::vector<int32_t>>> calibration_windows(const Tokenizer& tok, std::string_view text, int32_t ctx,
                                                              int32_t max_windows) {
  if (ctx < 2) return invalid_argument("the calibration window must be at least 2 tokens");
  const std::vector<int32_t> tokens = tok.encode(text, true, false);
  std::vector<std::vector<int32_t>> windows;
  for (size_t at = 0;
       at + static_cast<size_t>(ctx) <= tokens.size() && static_cast<int32_t>(windows.size()) < max_windows;
       at += static_cast<size_t>(ctx)) {
    windows.emplace_back(tokens.begin() + static_cast<int64_t>(at), tokens.begin() + static_cast<int64_t>(at + ctx));
    if (tok.bos_id() >= 0) windows.back()[0] = tok.bos_id();
  }
  if (windows.empty())
    return invalid_argument("the calibration text has " + std::to_string(tokens.size()) +
                            " tokens, fewer than one window of " + std::to_string(ctx));
  return windows;
}

Status run_calibration(std::unique_ptr<LlamaModel> model, const std::vector<std::vector<int32_t>>& windows,
                       LinearObserver observer, const CalibrationRun& run) {
  RunnerConfig rc;
  rc.num_threads = run.threads;
  rc.repack = run.repack;
  rc.num_blocks = 0;
  for (const auto& w : windows) rc.num_blocks += (static_cast<int64_t>(w.size()) + rc.block_size - 1) / rc.block_size;
  model->set_linear_observer(std::move(observer));
  PAGODA_ASSIGN_OR_RETURN(auto runner, ModelRunner::create(std::move(model), rc));
  KVCacheManager kv(static_cast<int32_t>(rc.num_blocks), rc.block_size);
  std::vector<Sequence> seqs(windows.size());
  SchedulerOutput step;
  for (size_t i = 0; i < windows.size(); ++i) {
    Sequence& s = seqs[i];
    s.seq_id = SeqId{static_cast<int64_t>(i)};
    s.tokens = windows[i];
    const auto n = static_cast<int32_t>(s.tokens.size());
    s.num_prompt_tokens = n;
    if (!kv.allocate_slots(s.seq_id, n)) return internal_error("calibration: KV allocation failed");
    step.scheduled.push_back({&s, n, run.observe_output ? n : 1});
    step.num_batched_tokens += n;
  }
  runner->execute(step, kv);
  return Status::ok();
}

std::vector<std::string> linear_tensor_names(int32_t layer, LinearInput which, bool has_output) {
  const std::string p = "blk." + std::to_string(layer) + ".";
  switch (which) {
    case LinearInput::kAttnQKV: return {p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"};
    case LinearInput::kAttnOut: return {p + "attn_output.weight"};
    case LinearInput::kFfnGateUp: return {p + "ffn_gate.weight", p + "ffn_up.weight"};
    case LinearInput::kFfnDown: return {p + "ffn_down.weight"};
    case LinearInput::kOutput: return {has_output ? "output.weight" : "token_embd.weight"};
  }
  return {};
}

}  // namespace pagoda::quant
