#include "engine/prompt_logits.h"

#include "gguf/gguf_file.h"
#include "kv/kv_cache_manager.h"
#include "model/llama_model.h"
#include "sched/scheduler.h"

namespace pagoda {

Result<LogitsRunner> make_logits_runner(const std::string& path, int32_t max_tokens, int32_t num_threads,
                                        dist::Comm* comm, int32_t pp) {
  auto file = gguf::GGUFFile::open(path);
  if (!file) return file.status();
  auto lm = LlamaModel::load(**file);
  if (!lm) return lm.status();
  RunnerConfig rc;
  rc.num_threads = num_threads;
  rc.comm = comm;
  rc.pp = pp;
  rc.num_blocks = (std::max(1, max_tokens) + rc.block_size - 1) / rc.block_size;
  auto runner = ModelRunner::create(std::move(*lm), rc);
  if (!runner) return runner.status();
  return LogitsRunner{std::move(*file), std::move(*runner)};
}

Result<std::vector<float>> prompt_logits(ModelRunner& runner, std::span<const int32_t> ids) {
  const ModelConfig& c = runner.config();
  const auto n = static_cast<int32_t>(ids.size());
  if (n == 0) return invalid_argument("no token ids to evaluate");
  for (int32_t id : ids)
    if (id < 0 || id >= c.vocab_size)
      return invalid_argument("token id " + std::to_string(id) + " is outside the vocabulary (size " +
                              std::to_string(c.vocab_size) + ")");
  const int64_t capacity = runner.num_kv_blocks() * runner.block_size();
  if (n > capacity) return invalid_argument("more token ids than the runner has KV room for");
  KVCacheManager kv(static_cast<int32_t>(runner.num_kv_blocks()), runner.block_size());
  if (runner.has_recurrent_state()) kv.enable_state_slots();
  Sequence seq;
  seq.seq_id = SeqId{0};
  seq.tokens.assign(ids.begin(), ids.end());
  seq.num_prompt_tokens = n;
  if (!kv.allocate_slots(seq.seq_id, n)) return internal_error("KV allocation failed");
  SchedulerOutput step;
  step.scheduled.push_back({&seq, n, n});  // every position's logits
  step.num_batched_tokens = n;
  const std::span<const float> logits = runner.execute(step, kv);
  std::vector<float> out(logits.begin(), logits.begin() + static_cast<int64_t>(n) * c.vocab_size);
  kv.free(seq.seq_id);
  return out;
}

}  // namespace pagoda
