#include "engine/engine.h"

#include <algorithm>
#include <chrono>

#include "core/check.h"

namespace pagoda {
namespace {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

Engine::~Engine() = default;

double Engine::now() const { return steady_seconds() - clock_origin_; }

Result<std::unique_ptr<Engine>> Engine::create(const std::string& model_path, const EngineConfig& config) {
  std::unique_ptr<Engine> e(new Engine());
  e->clock_origin_ = steady_seconds();
  PAGODA_ASSIGN_OR_RETURN(e->file_, gguf::GGUFFile::open(model_path));
  PAGODA_ASSIGN_OR_RETURN(e->model_, LlamaModel::load(*e->file_));
  PAGODA_ASSIGN_OR_RETURN(e->tokenizer_, Tokenizer::from_gguf(*e->file_));
  const ModelConfig& mc = e->model_->config();
  if (e->tokenizer_->vocab_size() > mc.n_vocab)
    return invalid_argument("the tokenizer has more tokens than the model's embedding rows");
  if (config.sched.max_num_batched_tokens <= 0) return invalid_argument("max batched tokens must be positive");
  if (config.sched.max_num_seqs <= 0) return invalid_argument("max seqs must be positive");
  if (config.max_model_len < 0) return invalid_argument("max model length must not be negative");
  e->max_model_len_ = config.max_model_len > 0 ? config.max_model_len : mc.n_ctx_train;

  const int32_t threads = config.num_threads > 0 ? config.num_threads : default_num_threads();
  e->pool_ = std::make_unique<ThreadPool>(threads);
  e->model_->repack(*e->pool_);
  if (config.block_size < 1 || config.block_size > 1024) return invalid_argument("block size must be in 1..1024");
  if (config.kv_cache_dtype != DType::kF32 && config.kv_cache_dtype != DType::kF16)
    return invalid_argument("KV cache dtype must be f32 or f16");
  const auto block_bytes = static_cast<int64_t>(
      KVStorage::bytes_per_block(mc.n_layer, config.block_size, mc.n_head_kv, mc.head_dim, config.kv_cache_dtype));
  const int64_t num_blocks = config.kv_cache_bytes / block_bytes;
  const int64_t num_host_blocks = std::max<int64_t>(0, config.swap_space_bytes) / block_bytes;
  if (num_blocks < 1)
    return invalid_argument("KV cache memory (" + std::to_string(config.kv_cache_bytes) +
                            " bytes) is smaller than one block (" + std::to_string(block_bytes) + " bytes)");
  PAGODA_RETURN_IF_ERROR(KVCacheManager::validate_config(num_blocks, config.block_size));
  PAGODA_RETURN_IF_ERROR(KVCacheManager::validate_config(num_host_blocks, config.block_size));
  e->kv_manager_ = std::make_unique<KVCacheManager>(static_cast<int32_t>(num_blocks), config.block_size,
                                                    static_cast<int32_t>(num_host_blocks));
  PAGODA_ASSIGN_OR_RETURN(e->kv_storage_,
                          KVStorage::create(mc.n_layer, static_cast<int32_t>(num_blocks), config.block_size,
                                            mc.n_head_kv, mc.head_dim, config.kv_cache_dtype));
  if (num_host_blocks > 0) {
    PAGODA_ASSIGN_OR_RETURN(e->host_storage_,
                            KVStorage::create(mc.n_layer, static_cast<int32_t>(num_host_blocks), config.block_size,
                                              mc.n_head_kv, mc.head_dim, config.kv_cache_dtype));
  }
  e->kv_manager_->enable_prefix_cache(config.enable_prefix_caching);
  e->capacity_tokens_ = num_blocks * config.block_size;
  e->scheduler_ = std::make_unique<Scheduler>(config.sched, *e->kv_manager_);
  return e;
}

Status Engine::validate(const RequestSpec& spec) const {
  const ModelConfig& mc = model_->config();
  if (spec.prompt.empty()) return invalid_argument("the prompt is empty");
  for (int32_t t : spec.prompt)
    if (t < 0 || t >= mc.n_vocab) return invalid_argument("prompt token id " + std::to_string(t) + " is out of range");
  if (spec.max_tokens < 1) return invalid_argument("max_tokens must be at least 1");
  if (spec.n < 1 || spec.n > 256) return invalid_argument("n must be in 1..256");
  if (spec.use_beam_search && (spec.beam_width < 1 || spec.beam_width > 64 || spec.n > spec.beam_width))
    return invalid_argument("beam search needs 1 <= n <= beam width <= 64");
  const auto prompt_len = static_cast<int64_t>(spec.prompt.size());
  if (prompt_len >= max_model_len_)
    return out_of_range("the prompt has " + std::to_string(prompt_len) + " tokens but the context length is " +
                        std::to_string(max_model_len_));
  if (prompt_len + 1 > capacity_tokens_)
    return out_of_range("the prompt needs more KV cache (" + std::to_string(prompt_len + 1) +
                        " tokens) than the whole pool holds (" + std::to_string(capacity_tokens_) + ")");
  for (int32_t t : spec.stop_token_ids)
    if (t < 0 || t >= mc.n_vocab) return invalid_argument("stop token id " + std::to_string(t) + " is out of range");
  return spec.sampling.validate(mc.n_vocab);
}

std::unique_ptr<Engine::Choice> Engine::make_choice(Request& req, int32_t index, const Sequence& base) {
  auto c = std::make_unique<Choice>();
  c->request = &req;
  c->seq = base;
  c->seq.index = index;
  c->seq.seq_id = SeqId{next_seq_id_++};
  SamplingParams sp = req.spec.sampling;
  if (sp.seed) sp.seed = *sp.seed + static_cast<uint64_t>(index);
  c->sampler = std::make_unique<Sampler>(sp, model_->config().n_vocab);
  c->decoder = std::make_unique<StreamDecoder>(*tokenizer_);
  c->stops = std::make_unique<StopStringMatcher>(req.spec.stop);
  return c;
}

Result<RequestId> Engine::add_request(RequestSpec spec, std::optional<RequestId> id_in) {
  PAGODA_RETURN_IF_ERROR(validate(spec));
  const RequestId id = id_in.value_or(RequestId{next_id_});
  next_id_ = std::max(next_id_, id.value) + 1;
  if (requests_.count(id)) return invalid_argument("duplicate request id " + std::to_string(id.value));
  auto req = std::make_unique<Request>();
  const auto prompt_len = static_cast<int64_t>(spec.prompt.size());
  req->timing.arrival = now();
  Sequence base;
  base.request_id = id;
  base.tokens = spec.prompt;
  base.num_prompt_tokens = static_cast<int32_t>(prompt_len);
  base.max_total_tokens = static_cast<int32_t>(
      std::min<int64_t>({prompt_len + spec.max_tokens, max_model_len_, capacity_tokens_}));
  base.priority = spec.priority;
  base.arrival_time = req->timing.arrival;
  req->spec = std::move(spec);
  req->choices.push_back(make_choice(*req, 0, base));
  scheduler_->add(&req->choices[0]->seq);
  requests_.emplace(id, std::move(req));
  return id;
}

bool Engine::abort(RequestId id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return false;
  for (auto& c : it->second->choices)
    if (!c->finished) scheduler_->finish(&c->seq, FinishReason::kAbort);
  requests_.erase(it);
  return true;
}

void Engine::run_swaps(const SchedulerOutput& out) {
  // Device -> host first: a block swapped out may be reused this very step.
  for (const auto& c : out.swap_out) kv_storage_->copy_block_to(c.src, *host_storage_, c.dst);
  for (const auto& c : out.swap_in) host_storage_->copy_block_to(c.src, *kv_storage_, c.dst);
  for (const auto& c : out.cow) kv_storage_->copy_block(c.src, c.dst);
}

void Engine::build_batch(const SchedulerOutput& out) {
  batch_.clear();
  logit_owners_.clear();
  const int32_t bs = kv_manager_->block_size();
  for (const auto& s : out.scheduled) {
    Sequence& seq = *s.seq;
    SeqSlice slice;
    slice.token_begin = static_cast<int32_t>(batch_.tokens.size());
    slice.num_tokens = s.num_new_tokens;
    slice.kv_len = seq.num_computed_tokens + s.num_new_tokens;
    const auto& table = kv_manager_->block_table(seq.seq_id);
    slice.block_table = table.data();
    for (int32_t p = seq.num_computed_tokens; p < slice.kv_len; ++p) {
      batch_.tokens.push_back(seq.tokens[p]);
      batch_.positions.push_back(p);
      batch_.slots.push_back(int64_t{table[p / bs]} * bs + p % bs);
    }
    if (s.needs_sample) {
      batch_.logit_rows.push_back(slice.token_begin + slice.num_tokens - 1);
      logit_owners_.push_back(requests_.at(seq.request_id)->choices.at(seq.index).get());
    }
    batch_.seqs.push_back(slice);
  }
}

void Engine::postprocess(Choice& c, SampleResult sr, RequestOutput& o) {
  Request& req = *c.request;
  Sequence& seq = c.seq;
  const int32_t token = sr.token;
  seq.tokens.push_back(token);
  o.id = seq.request_id;
  o.index = seq.index;
  o.new_tokens.push_back(token);
  o.samples.push_back(std::move(sr));
  const double t = now();
  if (req.timing.first_token < 0) req.timing.first_token = t;
  req.timing.last_token = t;

  FinishReason reason = FinishReason::kNone;
  bool stopped_by_string = false;
  const bool eos = !req.spec.ignore_eos && tokenizer_->is_eog(token);
  const bool stop_id = std::find(req.spec.stop_token_ids.begin(), req.spec.stop_token_ids.end(), token) !=
                       req.spec.stop_token_ids.end();
  if (eos || stop_id) {
    reason = FinishReason::kStop;  // the stop token's text is not emitted
  } else {
    o.text += c.stops->push(c.decoder->push(token), &stopped_by_string);
    if (stopped_by_string) reason = FinishReason::kStop;
  }
  if (reason == FinishReason::kNone && seq.num_tokens() >= seq.max_total_tokens) reason = FinishReason::kLength;
  if (reason != FinishReason::kNone && !stopped_by_string) {
    bool stopped = false;
    o.text += c.stops->push(c.decoder->flush(), &stopped);
    if (!stopped) o.text += c.stops->flush();
  }
  o.finish_reason = reason;
  o.finished = reason != FinishReason::kNone;
  o.num_prompt_tokens = seq.num_prompt_tokens;
  o.num_output_tokens = seq.num_output_tokens();
  o.num_cached_tokens = req.num_cached_tokens;
  o.timing = req.timing;
}

void Engine::finish_choice(Choice& c, FinishReason reason) {
  scheduler_->finish(&c.seq, reason);
  c.finished = true;
  ++c.request->num_finished;
}

void Engine::fork_choices(Request& req, const float* logits, std::vector<RequestOutput>& outputs) {
  const int32_t n_vocab = model_->config().n_vocab;
  Choice& parent = *req.choices[0];
  for (int32_t i = 1; i < req.spec.n; ++i) {
    req.choices.push_back(make_choice(req, i, parent.seq));
    Choice& child = *req.choices.back();
    // Shares every block of the prompt; the partly filled last block is
    // copied on the first write (KVCacheManager::allocate_for_write).
    kv_manager_->fork(parent.seq.seq_id, child.seq.seq_id);
    scheduler_->add_running(&child.seq);
    fork_logits_.assign(logits, logits + n_vocab);
    const Sequence& seq = child.seq;
    SampleResult sr = child.sampler->sample(fork_logits_.data(), std::span<const int32_t>(seq.tokens.data(), seq.num_prompt_tokens),
                                            std::span<const int32_t>());
    RequestOutput o;
    postprocess(child, std::move(sr), o);
    outputs.push_back(std::move(o));
  }
}

std::vector<RequestOutput> Engine::step() {
  std::vector<RequestOutput> outputs;
  const double t_start = now();
  SchedulerOutput out = scheduler_->schedule(t_start);
  if (out.empty()) return outputs;
  run_swaps(out);
  build_batch(out);
  for (const auto& s : out.scheduled) {
    Request& r = *requests_.at(s.seq->request_id);
    if (s.seq->index == 0 && r.timing.first_scheduled < 0) {
      r.timing.first_scheduled = t_start;
      r.num_cached_tokens = s.seq->num_cached_tokens;
      stats_.num_prompt_tokens += s.seq->num_prompt_tokens;
      stats_.num_cached_prompt_tokens += s.seq->num_cached_tokens;
    }
  }
  const int32_t n_vocab = model_->config().n_vocab;
  logits_.resize(batch_.logit_rows.size() * static_cast<size_t>(n_vocab));
  model_->forward(batch_, *kv_storage_, *pool_, logits_.data());
  scheduler_->on_step_done(out);

  int64_t num_prompt = 0;
  for (const auto& s : out.scheduled) {
    const int32_t first = s.seq->num_computed_tokens - s.num_new_tokens;
    num_prompt += std::max(0, std::min(s.seq->num_prompt_tokens, s.seq->num_computed_tokens) - first);
  }
  std::vector<Request*> beam_requests;
  for (size_t r = 0; r < logit_owners_.size(); ++r) {
    Choice& c = *logit_owners_[r];
    Request& req = *c.request;
    float* row = &logits_[r * n_vocab];
    if (req.spec.use_beam_search) {
      beam_record(c, row);
      beam_requests.push_back(&req);
      continue;
    }
    if (req.spec.n > 1 && req.choices.size() == 1) fork_choices(req, row, outputs);
    const Sequence& seq = c.seq;
    const std::span<const int32_t> prompt(seq.tokens.data(), seq.num_prompt_tokens);
    const std::span<const int32_t> output(seq.tokens.data() + seq.num_prompt_tokens, seq.num_output_tokens());
    SampleResult sr = c.sampler->sample(row, prompt, output);
    RequestOutput o;
    postprocess(c, std::move(sr), o);
    outputs.push_back(std::move(o));
  }
  std::sort(beam_requests.begin(), beam_requests.end());
  beam_requests.erase(std::unique(beam_requests.begin(), beam_requests.end()), beam_requests.end());
  for (Request* req : beam_requests) beam_step(*req, outputs);  // may finish and erase req
  const double secs = now() - t_start;
  ++stats_.num_steps;
  stats_.num_prompt_tokens_computed += num_prompt;
  stats_.num_decode_tokens_computed += out.num_batched_tokens - num_prompt;
  stats_.num_generated_tokens += static_cast<int64_t>(outputs.size());
  stats_.kv_waste_sum += kv_manager_->kv_waste();
  (num_prompt * 2 > out.num_batched_tokens ? stats_.prefill_seconds : stats_.decode_seconds) += secs;

  for (auto& o : outputs) {
    if (!o.finished) continue;
    auto it = requests_.find(o.id);
    if (it == requests_.end()) continue;  // beam search finished it already
    Request& req = *it->second;
    finish_choice(*req.choices.at(o.index), o.finish_reason);
    if (req.num_finished == req.spec.n) {
      o.request_finished = true;
      requests_.erase(it);
      ++stats_.num_finished;
    }
  }
  return outputs;
}

}  // namespace pagoda
