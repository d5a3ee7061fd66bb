// Speculative decoding for one sequence (n = 1): each step verifies the
// drafts the scheduler ran as extra positions, accepts a prefix of them by
// the exact rejection rule (Sampler::verify_draft), emits one more token from
// the target (the correction, or a bonus token when every draft passed), and
// proposes the drafts of the next step. Stop tokens, stop strings and
// max_tokens end the run at the token that triggers them, exactly as without
// speculation: tokens past it are never emitted. Under a grammar each row is
// masked for the text accepted before it, so p is the constrained
// distribution sampling without speculation uses; drafts the grammar refuses
// are cut before they are scheduled (chains; a tree is verified unfiltered).
// Drafts may form a tree (lookahead): the verifier walks it from the root,
// each accepted node's K/V moving to the next position of the sequence.
#include <algorithm>
#include <optional>
#include <span>
#include <vector>

#include "core/check.h"
#include "engine/decoding.h"

namespace pagoda {
namespace {

class SpeculativeDecoding : public DecodingStrategy {
 public:
  SpeculativeDecoding(Request& req, DecodingHost& host) : req_(req), host_(host) {}

  void on_logits(Choice& c, float* logits, int32_t num_rows, std::vector<RequestOutput>& outputs) override {
    // emit_token appends to seq.tokens, never to the drafts: references are safe.
    const std::vector<int32_t>& drafts = c.seq.draft_tokens;
    const std::vector<int32_t>& parents = c.seq.draft_parents;
    const auto num_drafts = static_cast<int32_t>(drafts.size());
    PAGODA_CHECK(num_rows == 1 + num_drafts);
    const int32_t vocab_size = c.sampler->vocab_size();
    // A stateful proposer reads the drafts' raw logits before any is processed.
    if (c.spec_state) host_.proposer()->observe(c.spec_state.get(), logits + vocab_size, num_drafts, vocab_size);
    // Tree drafts sit at cache positions base + d; each accepted one moves to
    // the next position of the sequence.
    const bool tree = !parents.empty();
    const int32_t base = c.seq.num_cache_tokens();
    std::optional<RequestOutput> out;
    int32_t num_accepted = 0;
    path_.clear();          // the accepted drafts
    bool rejected = false;  // the run ended at a draft the target refused
    // node: the last accepted draft (-1: none yet); its row scores what follows.
    const float* last_row = logits;  // the row the newest token was sampled from
    const size_t num_tokens_before = c.seq.tokens.size();
    for (int32_t node = -1; !c.finished;) {
      float* row = logits + static_cast<size_t>(node + 1) * vocab_size;
      last_row = row;
      const Sequence& seq = c.seq;
      // Penalties see every token accepted so far, as they would unspeculated.
      const std::span<const int32_t> prompt(seq.tokens.data(), seq.num_prompt_tokens);
      const std::span<const int32_t> output(seq.tokens.data() + seq.num_prompt_tokens, seq.num_output_tokens());
      if (!apply_grammar(c, row, vocab_size, host_)) {
        RequestOutput o = grammar_dead_end(c, host_);
        if (out) {
          merge_output(*out, std::move(o));
        } else {
          out = std::move(o);
        }
        break;
      }
      SampleResult sr;
      int32_t next = -1;  // the draft accepted here
      if (tree) {
        // Deterministic drafts (q one-hot): sampling from p and following the
        // child with that token, if any, is the rejection rule over all
        // children at once — each child is taken with probability p(child).
        sr = c.sampler->sample(row, prompt, output);
        bool has_child = false;
        for (int32_t d = node + 1; d < num_drafts && next < 0; ++d) {
          if (parents[d] != node) continue;
          has_child = true;
          if (drafts[d] == sr.token) next = d;
        }
        rejected = has_child && next < 0;
        if (next >= 0) host_.move_draft_kv(c.seq, base + next, base + num_accepted);
      } else if (node + 1 < num_drafts) {
        // A draft model's drafts come with their distributions q.
        const int32_t d = node + 1;
        std::span<const float> q;
        if (!c.draft_q.empty())
          q = std::span<const float>(c.draft_q).subspan(static_cast<size_t>(d) * vocab_size, vocab_size);
        bool accepted = false;
        sr = c.sampler->verify_draft(row, prompt, output, drafts[d], q, &accepted);
        if (accepted) next = d;
        rejected = !accepted;
      } else {
        sr = c.sampler->sample(row, prompt, output);
      }
      RequestOutput o = emit_token(c, std::move(sr), host_);
      if (out) {
        merge_output(*out, std::move(o));
      } else {
        out = std::move(o);
      }
      if (next < 0) break;
      node = next;
      path_.push_back(next);
      ++num_accepted;
    }
    outputs.push_back(std::move(*out));
    if (c.spec_state)
      host_.proposer()->verified(c.spec_state.get(), std::span<const int32_t>(c.seq.tokens).subspan(num_tokens_before));
    // A verification that ended the choice counts in the statistics too.
    host_.accept_drafts(c, num_drafts, path_, rejected);
    if (c.finished) return;
    c.seq.clear_drafts();
    const Proposer& p = *host_.proposer();
    if (p.wants_hidden()) {
      if (!c.spec_state) c.spec_state = p.make_state();
      p.set_hidden(c.spec_state.get(), host_.hidden_of(last_row));
    }
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
    host_.record_proposal();
    const Proposer& p = *host_.proposer();
    c.draft_q.clear();
    if (p.drafts_after_scheduling()) {
      // Positions only: the draft model fills them once they are scheduled
      // (and times itself).
      p.propose(c.seq.tokens, k, &c.seq.draft_tokens);
      return;
    }
    const double t0 = host_.now();
    if (!c.spec_state) c.spec_state = p.make_state();
    // A tree is limited in depth by the room left, in size by the setting.
    p.propose_tree(c.spec_state.get(), c.seq.tokens, host_.num_spec_tokens(), k, &c.seq.draft_tokens,
                   &c.seq.draft_parents);
    if (c.matcher && c.seq.draft_parents.empty()) {
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
  std::vector<int32_t> path_;  // the accepted drafts of the last verification
};

}  // namespace

std::unique_ptr<DecodingStrategy> make_speculative_decoding(Request& req, DecodingHost& host) {
  return std::make_unique<SpeculativeDecoding>(req, host);
}

}  // namespace pagoda
