// How a request turns logits into tokens. Three strategies behind one
// interface — plain sampling (n = 1), parallel sampling (n > 1: choices
// forked after the prompt, sharing its blocks) and beam search — so the
// engine step never branches on the kind of request. Speculative decoding
// adds a fourth.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/request.h"
#include "grammar/matcher.h"
#include "grammar/token_vocab.h"
#include "sample/sampler.h"
#include "sched/sequence.h"
#include "spec/draft_planner.h"
#include "spec/proposer.h"
#include "tokenizer/stop_strings.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {

struct Request;
class DecodingStrategy;

// One of a request's sequences (one of n choices, or a beam) with its own
// sampler and text state.
struct Choice {
  Request* request = nullptr;
  Sequence seq;
  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<StreamDecoder> decoder;
  std::unique_ptr<StopStringMatcher> stops;
  bool finished = false;
  AcceptanceCounts spec_acceptance;  // for adaptive draft lengths
  double spec_planned_gain = 0;      // the expected gain the planner gave its current drafts
  // Draft model: draws the drafts (the request's parameters, its own seed)
  // and the distributions q they were drawn from, [drafts][vocab] (empty
  // when greedy: q is then one-hot).
  std::unique_ptr<Sampler> draft_sampler;
  std::vector<float> draft_q;
  // A stateful proposer's state for this choice (Proposer::make_state).
  std::unique_ptr<ProposerState> spec_state;
  // Structured output: the grammar's parse of this choice's text so far.
  std::unique_ptr<grammar::Matcher> matcher;
};

struct Request {
  RequestSpec spec;                                       // spec.stop is moved into `stops`
  std::shared_ptr<const std::vector<std::string>> stops;  // shared by every choice's matcher
  std::vector<std::unique_ptr<Choice>> choices;
  RequestTiming timing;
  int32_t num_cached_tokens = 0;  // prompt tokens served by the prefix cache
  int32_t num_finished = 0;       // finished choices
  std::unique_ptr<DecodingStrategy> strategy;
  std::shared_ptr<const KVBlockExport> kv_export;  // spec.export_kv: taken when the first choice finishes
};

// What a strategy may ask of the engine.
class DecodingHost {
 public:
  virtual ~DecodingHost() = default;
  // A new choice of `req` that shares every KV block of `parent` (copied on
  // its first write) and joins the running set.
  virtual Choice& fork_choice(Request& req, const Choice& parent) = 0;
  // Takes the choice out of scheduling and frees its blocks.
  virtual void finish_choice(Choice& c, FinishReason reason) = 0;
  virtual const Tokenizer& tokenizer() const = 0;
  virtual double now() const = 0;
  // Speculative decoding: the proposer (null when off) and draft length.
  virtual const Proposer* proposer() const = 0;
  virtual int32_t num_spec_tokens() const = 0;
  // The first num_accepted drafts of c were accepted (and appended to its
  // tokens); the rest are rolled back (nothing to roll back once c has
  // finished). Counts the verification. tree_path: the accepted drafts'
  // indices, root first (a chain's are 0..num_accepted-1); rejected: the
  // accepted run ended at a draft the target refused (not at the end of a
  // chain or at a tree's leaf).
  virtual void accept_drafts(Choice& c, int32_t num_drafts, std::span<const int32_t> tree_path, bool rejected) = 0;
  // An accepted draft of a tree moves to its place in the sequence: its K/V
  // rows go from cache position from_pos to to_pos (to_pos <= from_pos).
  virtual void move_draft_kv(const Sequence& seq, int32_t from_pos, int32_t to_pos) = 0;
  // The target's final-normed hidden state behind a row of this step's
  // logits (a pointer on_logits was given).
  virtual std::span<const float> hidden_of(const float* logits_row) const = 0;
  // Time spent in the proposer, and a proposal asked of it, for the statistics.
  virtual void record_draft_seconds(double seconds) = 0;
  virtual void record_proposal() = 0;
  // Structured output: the vocabulary as grammars see it (built on first
  // use), and the time one token mask took.
  virtual const grammar::TokenVocab& grammar_vocab() = 0;
  virtual void record_grammar_mask(double seconds) = 0;
};

class DecodingStrategy {
 public:
  virtual ~DecodingStrategy() = default;
  // The logits of choice c's last num_rows computed positions, row-major
  // (the strategy may modify them): one row, or 1 + its drafts when it
  // verifies draft tokens. Appends the outputs it produces.
  virtual void on_logits(Choice& c, float* logits, int32_t num_rows, std::vector<RequestOutput>& outputs) = 0;
  // Called once per step for a request that received logits, after all of
  // them (beam search selects the next beams here).
  virtual void end_step(std::vector<RequestOutput>& outputs) {}
  // Every output of the request has been emitted: the engine drops it.
  virtual bool done() const = 0;
};

std::unique_ptr<DecodingStrategy> make_decoding_strategy(Request& req, DecodingHost& host);

// Appends a sampled token to c and returns its output: text delta (UTF-8
// complete, stop strings cut), stop token / stop string / length checks.
// Finishes the choice through the host when it ended.
RequestOutput emit_token(Choice& c, SampleResult sr, DecodingHost& host);

// Beam search (engine/beam_search.cc).
std::unique_ptr<DecodingStrategy> make_beam_search(Request& req, DecodingHost& host);
// Speculative decoding for n = 1 (engine/speculative_decoding.cc).
std::unique_ptr<DecodingStrategy> make_speculative_decoding(Request& req, DecodingHost& host);

// The vocabulary as grammars see it: token texts, control and end tokens
// never matched as text, end tokens allowed once a grammar is complete.
std::unique_ptr<grammar::TokenVocab> make_grammar_vocab(const Tokenizer& tok);

// Structured output: sets the logits of every token c's grammar forbids next
// to -inf (nothing for an unconstrained choice). False when the grammar
// allows no token of the vocabulary: the caller ends the choice with
// grammar_dead_end.
bool apply_grammar(Choice& c, float* logits, int32_t vocab_size, DecodingHost& host);
RequestOutput grammar_dead_end(Choice& c, DecodingHost& host);

// Appends `next` (one token's output of the same choice) to `into`.
void merge_output(RequestOutput& into, RequestOutput next);

}  // namespace pagoda
