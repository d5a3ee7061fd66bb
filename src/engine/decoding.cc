#include "engine/decoding.h"

#include <algorithm>
#include <limits>
#include <span>

#include "core/check.h"

namespace pagoda {
namespace {

SampleResult sample_choice(Choice& c, float* logits) {
  const Sequence& seq = c.seq;
  const std::span<const int32_t> prompt(seq.tokens.data(), seq.num_prompt_tokens);
  const std::span<const int32_t> output(seq.tokens.data() + seq.num_prompt_tokens, seq.num_output_tokens());
  return c.sampler->sample(logits, prompt, output);
}

// n = 1: one sample per logits row.
class PlainDecoding : public DecodingStrategy {
 public:
  PlainDecoding(Request& req, DecodingHost& host) : req_(req), host_(host) {}
  void on_logits(Choice& c, float* logits, int32_t num_rows, std::vector<RequestOutput>& outputs) override {
    PAGODA_CHECK(num_rows == 1);
    if (!apply_grammar(c, logits, c.sampler->vocab_size(), host_)) {
      outputs.push_back(grammar_dead_end(c, host_));
      return;
    }
    outputs.push_back(emit_token(c, sample_choice(c, logits), host_));
  }
  bool done() const override { return req_.num_finished == static_cast<int32_t>(req_.choices.size()); }

 protected:
  Request& req_;
  DecodingHost& host_;
};

// n > 1: choices 1..n-1 fork from choice 0 once its prompt is computed and
// sample their first token from the same logits; then each goes on alone.
class ParallelSampling : public PlainDecoding {
 public:
  using PlainDecoding::PlainDecoding;
  void on_logits(Choice& c, float* logits, int32_t num_rows, std::vector<RequestOutput>& outputs) override {
    if (req_.choices.size() == 1) fork(c, logits, outputs);
    PlainDecoding::on_logits(c, logits, num_rows, outputs);
  }
  bool done() const override { return req_.num_finished == req_.spec.n; }

 private:
  void fork(const Choice& parent, const float* logits, std::vector<RequestOutput>& outputs) {
    const int32_t vocab_size = parent.sampler->vocab_size();
    for (int32_t i = 1; i < req_.spec.n; ++i) {
      Choice& child = host_.fork_choice(req_, parent);
      if (parent.matcher) *child.matcher = *parent.matcher;
      scratch_.assign(logits, logits + vocab_size);  // sampling modifies its logits
      if (!apply_grammar(child, scratch_.data(), vocab_size, host_)) {
        outputs.push_back(grammar_dead_end(child, host_));
        continue;
      }
      outputs.push_back(emit_token(child, sample_choice(child, scratch_.data()), host_));
    }
  }

  std::vector<float> scratch_;
};

}  // namespace

std::unique_ptr<DecodingStrategy> make_decoding_strategy(Request& req, DecodingHost& host) {
  if (req.spec.use_beam_search) return make_beam_search(req, host);          // speculation off
  if (req.spec.n > 1) return std::make_unique<ParallelSampling>(req, host);  // speculation off
  // Speculation needs every token's K/V kept: not under a KV policy.
  if (host.proposer() && req.choices.front()->seq.kv_policy->full()) return make_speculative_decoding(req, host);
  return std::make_unique<PlainDecoding>(req, host);
}

std::unique_ptr<grammar::TokenVocab> make_grammar_vocab(const Tokenizer& tok) {
  const int32_t n = tok.vocab_size();
  std::vector<std::string> pieces(static_cast<size_t>(n));
  std::vector<bool> excluded(static_cast<size_t>(n), false);
  std::vector<int32_t> end_ids;
  for (int32_t t = 0; t < n; ++t) {
    pieces[static_cast<size_t>(t)] = tok.token_to_piece(t);
    excluded[static_cast<size_t>(t)] = tok.is_control(t) || tok.is_eog(t);
    if (tok.is_eog(t)) end_ids.push_back(t);
  }
  return std::make_unique<grammar::TokenVocab>(std::move(pieces), excluded, std::move(end_ids));
}

bool apply_grammar(Choice& c, float* logits, int32_t vocab_size, DecodingHost& host) {
  if (!c.matcher) return true;
  const double t0 = host.now();
  const grammar::TokenVocab& vocab = host.grammar_vocab();
  thread_local grammar::TokenMask mask;
  c.matcher->fill_mask(vocab, &mask);
  const int32_t n = std::min(vocab_size, vocab.size());
  constexpr float kBanned = -std::numeric_limits<float>::infinity();
  bool any = false;
  // A word at a time: in a large vocabulary most words are all-allowed (in
  // strings) or all-banned (elsewhere).
  for (int32_t base = 0; base < n; base += 64) {
    uint64_t word = mask[static_cast<size_t>(base) >> 6];
    const int32_t count = std::min(64, n - base);
    if (count < 64) word &= (uint64_t{1} << count) - 1;
    any = any || word != 0;
    if (word == ~uint64_t{0}) continue;
    float* row = logits + base;
    if (word == 0) {
      std::fill(row, row + count, kBanned);
      continue;
    }
    for (int32_t i = 0; i < count; ++i) {
      if (!((word >> i) & 1)) row[i] = kBanned;
    }
  }
  std::fill(logits + n, logits + vocab_size, kBanned);
  host.record_grammar_mask(host.now() - t0);
  return any;
}

RequestOutput grammar_dead_end(Choice& c, DecodingHost& host) {
  RequestOutput o;
  o.id = c.seq.request_id;
  o.index = c.seq.index;
  o.finished = true;
  o.finish_reason = FinishReason::kError;
  o.error = "the grammar allows no token of this model's vocabulary here";
  o.num_prompt_tokens = c.seq.num_prompt_tokens;
  o.num_output_tokens = c.seq.num_output_tokens();
  o.num_cached_tokens = c.request->num_cached_tokens;
  o.timing = c.request->timing;
  host.finish_choice(c, FinishReason::kError);
  return o;
}

void merge_output(RequestOutput& into, RequestOutput next) {
  into.new_tokens.insert(into.new_tokens.end(), next.new_tokens.begin(), next.new_tokens.end());
  for (auto& sr : next.samples) into.samples.push_back(std::move(sr));
  into.text += next.text;
  into.finished = next.finished;
  into.finish_reason = next.finish_reason;
  if (!next.error.empty()) into.error = next.error;
  into.num_output_tokens = next.num_output_tokens;
  into.timing = next.timing;
}

RequestOutput emit_token(Choice& c, SampleResult sr, DecodingHost& host) {
  Request& req = *c.request;
  Sequence& seq = c.seq;
  const int32_t token = sr.token;
  seq.tokens.push_back(token);
  RequestOutput o;
  o.id = seq.request_id;
  o.index = seq.index;
  o.new_tokens.push_back(token);
  o.samples.push_back(std::move(sr));
  const double t = host.now();
  if (req.timing.first_token < 0) req.timing.first_token = t;
  req.timing.last_token = t;

  FinishReason reason = FinishReason::kNone;
  bool stopped_by_string = false;
  // The mask allowed the token, so the grammar takes it (a row of NaN logits
  // is the exception: the sampler then returns token 0).
  bool grammar_error = false, grammar_done = false;
  if (c.matcher) {
    grammar_error = !c.matcher->accept_token(host.grammar_vocab(), token);
    grammar_done = c.matcher->is_finished();
  }
  const bool eos = !req.spec.ignore_eos && host.tokenizer().is_eog(token);
  const auto& stop_ids = req.spec.stop_token_ids;
  const bool stop_id = std::find(stop_ids.begin(), stop_ids.end(), token) != stop_ids.end();
  if (eos || stop_id) {
    reason = FinishReason::kStop;  // the stop token's text is not emitted
  } else {
    o.text += c.stops->push(c.decoder->push(token), &stopped_by_string);
    if (stopped_by_string) reason = FinishReason::kStop;
  }
  // A grammar with nothing left to add ends the text as its end token would.
  if (reason == FinishReason::kNone && grammar_done) reason = FinishReason::kStop;
  if (reason == FinishReason::kNone && seq.num_tokens() >= seq.max_total_tokens) reason = FinishReason::kLength;
  if (grammar_error) {
    reason = FinishReason::kError;
    o.error = "the sampled token does not continue the grammar (non-finite logits?)";
  }
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
  if (o.finished) host.finish_choice(c, reason);
  return o;
}

}  // namespace pagoda
