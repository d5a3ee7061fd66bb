// Beam search over the engine's sequences. Each live beam is a Choice with
// its own KV blocks; selecting the next beams forks a parent (sharing every
// block, copy-on-write on the next write) when it is chosen more than once
// and frees a parent that is not chosen at all.
#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "core/check.h"
#include "engine/decoding.h"

namespace pagoda {
namespace {

class BeamSearch : public DecodingStrategy {
 public:
  BeamSearch(Request& req, DecodingHost& host) : req_(req), host_(host) {}

  // Records the top (token, logprob) candidates of a beam's logits.
  void on_logits(Choice& c, float* logits, int32_t num_rows, std::vector<RequestOutput>&) override {
    PAGODA_CHECK(num_rows == 1);
    const int32_t vocab_size = c.sampler->vocab_size();
    const int32_t k = std::min(vocab_size, 2 * req_.spec.beam_width);
    float mx = -INFINITY;
    for (int32_t i = 0; i < vocab_size; ++i) mx = std::max(mx, logits[i]);
    double sum = 0;
    for (int32_t i = 0; i < vocab_size; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
    const double lse = mx + std::log(sum);
    std::vector<int32_t> idx(vocab_size);
    for (int32_t i = 0; i < vocab_size; ++i) idx[i] = i;
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                      [&](int32_t a, int32_t b) { return logits[a] != logits[b] ? logits[a] > logits[b] : a < b; });
    Beam& beam = beams_[&c];
    beam.candidates.clear();
    for (int32_t i = 0; i < k; ++i) beam.candidates.emplace_back(idx[i], static_cast<float>(logits[idx[i]] - lse));
    beam.has_candidates = true;
  }

  // Once every live beam has its candidates, selects the next beams.
  void end_step(std::vector<RequestOutput>& outputs) override;
  bool done() const override { return done_; }

 private:
  struct Beam {
    double cum_logprob = 0;
    std::vector<std::pair<int32_t, float>> candidates;  // top (token, logprob) of the last logits
    bool has_candidates = false;
  };
  struct Hypothesis {
    std::vector<int32_t> output;
    double score = 0;
    FinishReason reason = FinishReason::kStop;
  };
  struct Candidate {
    Choice* parent;
    int32_t token;
    double cum;
  };

  double score(double cum, size_t len) const {
    return cum / std::pow(static_cast<double>(std::max<size_t>(1, len)), req_.spec.length_penalty);
  }
  bool is_stop(int32_t token) const {
    const RequestSpec& spec = req_.spec;
    return (!spec.ignore_eos && host_.tokenizer().is_eog(token)) ||
           std::find(spec.stop_token_ids.begin(), spec.stop_token_ids.end(), token) != spec.stop_token_ids.end();
  }
  static std::vector<int32_t> output_of(const Sequence& s) {
    return std::vector<int32_t>(s.tokens.begin() + s.num_prompt_tokens, s.tokens.end());
  }
  void finish(std::vector<RequestOutput>& outputs);

  Request& req_;
  DecodingHost& host_;
  std::unordered_map<const Choice*, Beam> beams_;
  std::vector<Hypothesis> hypotheses_;  // finished beams
  bool done_ = false;
};

void BeamSearch::end_step(std::vector<RequestOutput>& outputs) {
  const RequestSpec& spec = req_.spec;
  std::vector<Choice*> live;
  for (auto& c : req_.choices)
    if (!c->finished) live.push_back(c.get());
  for (Choice* c : live)
    if (!beams_[c].has_candidates) return;  // a beam was not scheduled this step: wait for it

  std::vector<Candidate> cands;
  for (Choice* c : live)
    for (auto [tok, lp] : beams_[c].candidates) cands.push_back({c, tok, beams_[c].cum_logprob + lp});
  std::stable_sort(cands.begin(), cands.end(), [](const Candidate& a, const Candidate& b) { return a.cum > b.cum; });

  std::vector<Candidate> next;
  for (const Candidate& c : cands) {
    if (static_cast<int32_t>(next.size()) == spec.beam_width) break;
    if (is_stop(c.token)) {
      std::vector<int32_t> out = output_of(c.parent->seq);
      hypotheses_.push_back({out, score(c.cum, out.size() + 1), FinishReason::kStop});
      continue;
    }
    next.push_back(c);
  }

  // Forks first (the child copies the parent's tokens before any append).
  std::vector<std::pair<Choice*, Candidate>> extend;
  std::unordered_map<const Choice*, int> uses;
  for (const Candidate& c : next) {
    if (uses[c.parent]++ == 0) {
      extend.push_back({c.parent, c});
      continue;
    }
    extend.push_back({&host_.fork_choice(req_, *c.parent), c});
  }
  for (Choice* c : live)
    if (uses[c] == 0) host_.finish_choice(*c, FinishReason::kAbort);  // dropped beam: free its blocks
  for (auto& [c, cand] : extend) {
    c->seq.tokens.push_back(cand.token);
    Beam& beam = beams_[c];
    beam.cum_logprob = cand.cum;
    beam.has_candidates = false;
    if (c->seq.num_tokens() >= c->seq.max_total_tokens) {
      std::vector<int32_t> out = output_of(c->seq);
      hypotheses_.push_back({out, score(cand.cum, out.size()), FinishReason::kLength});
      host_.finish_choice(*c, FinishReason::kLength);
    }
  }
  bool any_live = false;
  for (auto& c : req_.choices) any_live = any_live || !c->finished;
  if (!any_live || static_cast<int32_t>(hypotheses_.size()) >= spec.beam_width) finish(outputs);
}

void BeamSearch::finish(std::vector<RequestOutput>& outputs) {
  for (auto& c : req_.choices)
    if (!c->finished) host_.finish_choice(*c, FinishReason::kAbort);
  std::stable_sort(hypotheses_.begin(), hypotheses_.end(),
                   [](const Hypothesis& a, const Hypothesis& b) { return a.score > b.score; });
  const int32_t n = std::min<int32_t>(req_.spec.n, static_cast<int32_t>(hypotheses_.size()));
  const Sequence& first = req_.choices[0]->seq;
  for (int32_t i = 0; i < n; ++i) {
    const Hypothesis& h = hypotheses_[i];
    RequestOutput o;
    o.id = first.request_id;
    o.index = i;
    o.new_tokens = h.output;
    StreamDecoder dec(host_.tokenizer());
    for (int32_t t : h.output) o.text += dec.push(t);
    o.text += dec.flush();
    o.finished = true;
    o.finish_reason = h.reason;
    o.num_prompt_tokens = first.num_prompt_tokens;
    o.num_output_tokens = static_cast<int32_t>(h.output.size());
    o.num_cached_tokens = req_.num_cached_tokens;
    o.timing = req_.timing;
    outputs.push_back(std::move(o));
  }
  if (n == 0) {  // cannot happen (every beam ends as a hypothesis); end the stream anyway
    RequestOutput o;
    o.id = first.request_id;
    o.finished = true;
    o.finish_reason = FinishReason::kStop;
    outputs.push_back(std::move(o));
  }
  done_ = true;
}

}  // namespace

std::unique_ptr<DecodingStrategy> make_beam_search(Request& req, DecodingHost& host) {
  return std::make_unique<BeamSearch>(req, host);
}

}  // namespace pagoda
