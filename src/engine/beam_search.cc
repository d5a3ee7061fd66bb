// Beam search over the engine's sequences. Each live beam is a Choice with
// its own KV blocks; selecting the next beams forks a parent (sharing every
// block, copy-on-write on the next write) when it is chosen more than once
// and frees a parent that is not chosen at all.
#include <algorithm>
#include <cmath>

#include "engine/engine.h"

namespace pagoda {

void Engine::beam_record(Choice& c, const float* logits) {
  const int32_t n_vocab = model_->config().n_vocab;
  const int32_t k = std::min(n_vocab, 2 * c.request->spec.beam_width);
  float mx = -INFINITY;
  for (int32_t i = 0; i < n_vocab; ++i) mx = std::max(mx, logits[i]);
  double sum = 0;
  for (int32_t i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
  const double lse = mx + std::log(sum);
  std::vector<int32_t> idx(n_vocab);
  for (int32_t i = 0; i < n_vocab; ++i) idx[i] = i;
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  });
  c.candidates.clear();
  for (int32_t i = 0; i < k; ++i)
    c.candidates.emplace_back(idx[i], static_cast<float>(logits[idx[i]] - lse));
  c.has_candidates = true;
}

void Engine::beam_step(Request& req, std::vector<RequestOutput>& outputs) {
  const RequestSpec& spec = req.spec;
  std::vector<Choice*> live;
  for (auto& c : req.choices)
    if (!c->finished) live.push_back(c.get());
  for (Choice* c : live)
    if (!c->has_candidates) return;  // a beam was not scheduled this step: wait for it

  struct Cand {
    Choice* parent;
    int32_t token;
    double cum;
  };
  std::vector<Cand> cands;
  for (Choice* c : live)
    for (auto [tok, lp] : c->candidates) cands.push_back({c, tok, c->cum_logprob + lp});
  std::stable_sort(cands.begin(), cands.end(), [](const Cand& a, const Cand& b) { return a.cum > b.cum; });

  auto score = [&](double cum, size_t len) {
    return cum / std::pow(static_cast<double>(std::max<size_t>(1, len)), spec.length_penalty);
  };
  std::vector<Cand> next;
  for (const Cand& c : cands) {
    if (static_cast<int32_t>(next.size()) == spec.beam_width) break;
    const bool eos = (!spec.ignore_eos && tokenizer_->is_eog(c.token)) ||
                     std::find(spec.stop_token_ids.begin(), spec.stop_token_ids.end(), c.token) !=
                         spec.stop_token_ids.end();
    if (eos) {
      const Sequence& s = c.parent->seq;
      std::vector<int32_t> out(s.tokens.begin() + s.num_prompt_tokens, s.tokens.end());
      req.hypotheses.push_back({out, score(c.cum, out.size() + 1), FinishReason::kStop});
      continue;
    }
    next.push_back(c);
  }

  // Forks first (the child copies the parent's tokens before any append).
  std::vector<std::pair<Choice*, Cand>> extend;
  std::vector<int> uses(req.choices.size(), 0);
  auto index_of = [&](Choice* c) { return static_cast<size_t>(c->seq.index); };
  for (const Cand& c : next) {
    if (uses[index_of(c.parent)]++ == 0) {
      extend.push_back({c.parent, c});
      continue;
    }
    req.choices.push_back(make_choice(req, static_cast<int32_t>(req.choices.size()), c.parent->seq));
    Choice& child = *req.choices.back();
    kv_manager_->fork(c.parent->seq.seq_id, child.seq.seq_id);
    scheduler_->add_running(&child.seq);
    extend.push_back({&child, c});
  }
  for (Choice* c : live)
    if (uses[index_of(c)] == 0) finish_choice(*c, FinishReason::kAbort);  // dropped beam: free its blocks
  for (auto& [c, cand] : extend) {
    c->seq.tokens.push_back(cand.token);
    c->cum_logprob = cand.cum;
    c->has_candidates = false;
    if (c->seq.num_tokens() >= c->seq.max_total_tokens) {
      const Sequence& s = c->seq;
      std::vector<int32_t> out(s.tokens.begin() + s.num_prompt_tokens, s.tokens.end());
      req.hypotheses.push_back({out, score(cand.cum, out.size()), FinishReason::kLength});
      finish_choice(*c, FinishReason::kLength);
    }
  }
  bool any_live = false;
  for (auto& c : req.choices) any_live = any_live || !c->finished;
  if (!any_live || static_cast<int32_t>(req.hypotheses.size()) >= spec.beam_width) beam_finish(req, outputs);
}

void Engine::beam_finish(Request& req, std::vector<RequestOutput>& outputs) {
  for (auto& c : req.choices)
    if (!c->finished) finish_choice(*c, FinishReason::kAbort);
  std::stable_sort(req.hypotheses.begin(), req.hypotheses.end(),
                   [](const Hypothesis& a, const Hypothesis& b) { return a.score > b.score; });
  const int32_t n = std::min<int32_t>(req.spec.n, static_cast<int32_t>(req.hypotheses.size()));
  const RequestId id = req.choices[0]->seq.request_id;
  for (int32_t i = 0; i < n; ++i) {
    const Hypothesis& h = req.hypotheses[i];
    RequestOutput o;
    o.id = id;
    o.index = i;
    o.new_tokens = h.output;
    StreamDecoder dec(*tokenizer_);
    for (int32_t t : h.output) o.text += dec.push(t);
    o.text += dec.flush();
    o.finished = true;
    o.finish_reason = h.reason;
    o.request_finished = i == n - 1;
    o.num_prompt_tokens = req.choices[0]->seq.num_prompt_tokens;
    o.num_output_tokens = static_cast<int32_t>(h.output.size());
    o.num_cached_tokens = req.num_cached_tokens;
    o.timing = req.timing;
    outputs.push_back(std::move(o));
  }
  if (n == 0) {  // cannot happen (every beam ends as a hypothesis); end the stream anyway
    RequestOutput o;
    o.id = id;
    o.finished = o.request_finished = true;
    o.finish_reason = FinishReason::kStop;
    outputs.push_back(std::move(o));
  }
  ++stats_.num_finished;
  requests_.erase(id);
}

}  // namespace pagoda
