// Speculative decoding for one sequence (n = 1): each step verifies the
// drafts the scheduler ran as extra positions, accepts a prefix of them by
// the exact rejection rule (Sampler::verify_draft), emits one more token from
// the target (the correction, or a bonus token when every draft passed), and
// proposes the drafts of the next step. Stop tokens, stop strings and
// max_tokens end the run at the token that triggers them, exactly as without
// speculation: tokens past it are never emitted. Under a grammar each row is
// masked for the text accepted before it, so p is the constrained
// distribution sampling without speculation uses; drafts the grammar refuses
// are cut before they are scheduled.
#include <algorithm>
#include <optional>
#include <span>

#include "core/check.h"
#include "engine/decoding.h"

namespace pagoda {
namespace {

class SpeculativeDecoding : public DecodingStrategy {
 public:
  SpeculativeDecoding(Request& req, DecodingHost& host) : req_(req), host_(host) {}

  void on_logits(Choice& c, float* logits, int32_t num_rows, std::vector<RequestOutput>& outputs) override {
    // emit_token appends to seq.tokens, never to draft_tokens: a reference is safe.
    const std::vector<int32_t>& drafts = c.seq.draft_tokens;
    const auto num_drafts = static_cast<int32_t>(drafts.size());
    PAGODA_CHECK(num_rows == 1 + num_drafts);
    const int32_t vocab_size = c.sampler->vocab_size();
    std::optional<RequestOutput> out;
    int32_t num_accepted = 0;
    for (int32_t i = 0; i <= num_drafts && !c.finished; ++i) {
      float* row = logits + static_cast<size_t>(i) * vocab_size;
      const Sequence& seq = c.seq;
      // Penalties see every token accepted so far, as they would unspeculated.
      const std::span<const int32_t> prompt(seq.tokens.data(), seq.num_prompt_tokens);
      const std::span<const int32_t> output(seq.tokens.data() + seq.num_prompt_tokens, seq.num_output_tokens());
      bool accepted = false;
      if (!apply_grammar(c, row, vocab_size, host_)) {
        RequestOutput o = grammar_dead_end(c, host_);
        if (out) {
          merge_output(*out, std::move(o));
        } else {
          out = std::move(o);
        }
        break;
      }
      // A draft model's drafts come with their distributions q.
      std::span<const float> q;
      if (!c.draft_q.empty() && i < num_drafts)
        q = std::span<const float>(c.draft_q).subspan(static_cast<size_t>(i) * vocab_size, vocab_size);
      SampleResult sr = i < num_drafts ? c.sampler->verify_draft(row, prompt, output, drafts[i], q, &accepted)
                                       : c.sampler->sample(row, prompt, output);
      RequestOutput o = emit_token(c, std::move(sr), host_);
      if (out) {
        merge_output(*out, std::move(o));
      } else {
        out = std::move(o);
      }
      if (!accepted) break;
      ++num_accepted;
    }
    outputs.push_back(std::move(*out));
    // A verification that ended the choice counts in the statistics too.
    host_.accept_drafts(c, num_drafts, num_accepted);
    if (c.finished) return;
    c.seq.draft_tokens.clear();
    propose(c);
  }

  bool done() const override { return req_.num_finished == 1; }

 private:
  void propose(Choice& c) {
    // Never propose past the length limit: at most max_total - tokens - 1
    // drafts leave room for the token the target adds.
    const int32_t room = c.seq.max_total_tokens - c.seq.num_tokens() - 1;
    const int32_t k = std::min(host_.num_spec_tokens(), room);
    if (k <= 0) return;
    const Proposer& p = *host_.proposer();
    c.draft_q.clear();
    if (p.drafts_after_scheduling()) {
      // Positions only: the draft model fills them once they are scheduled
      // (and times itself).
      p.propose(c.seq.tokens, k, &c.seq.draft_tokens);
      return;
    }
    const double t0 = host_.now();
    p.propose(c.seq.tokens, k, &c.seq.draft_tokens);
    if (c.matcher) {
      // Only drafts the grammar can accept are worth verifying.
      grammar::Matcher m = *c.matcher;
      auto& d = c.seq.draft_tokens;
      size_t keep = 0;
      while (keep < d.size() && !m.is_finished() && m.accept_token(host_.grammar_vocab(), d[keep])) ++keep;
      d.resize(keep);
    }
    host_.record_draft_seconds(host_.now() - t0);
  }

  Request& req_;
  DecodingHost& host_;
};

}  // namespace

std::unique_ptr<DecodingStrategy> make_speculative_decoding(Request& req, DecodingHost& host) {
  return std::make_unique<SpeculativeDecoding>(req, host);
}

}  // namespace pagoda
