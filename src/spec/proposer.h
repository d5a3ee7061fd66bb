// Speculative decoding proposers: given a sequence's tokens, guess how it
// continues. The engine schedules the guesses (draft tokens) as extra
// positions of the sequence and verifies them against the target model, so a
// proposer can be wrong without changing the output — it only changes speed.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace pagoda {

enum class SpecMethod {
  kNone,
  kNgram,      // prompt lookup: continue a repeated n-gram of the sequence itself
  kRetrieval,  // REST: continue the context's longest match in a corpus datastore
  kDraft,      // a smaller model with the same vocabulary drafts (spec/draft_model.h)
  kLayerSkip,  // the target with layers skipped drafts for itself (spec/layer_skip.h)
};

// Parses "none" | "ngram" | "retrieval" | "draft" | "layer-skip"; false for anything else.
bool parse_spec_method(std::string_view name, SpecMethod* out);
const char* spec_method_name(SpecMethod m);

class Proposer {
 public:
  virtual ~Proposer() = default;
  // Replaces *draft with at most max_tokens tokens proposed to follow
  // `tokens` (prompt + output so far); empty when there is no guess.
  virtual void propose(std::span<const int32_t> tokens, int32_t max_tokens, std::vector<int32_t>* draft) const = 0;
  // True when propose() only reserves positions and the tokens are written
  // after scheduling (the draft model drafts for the scheduled batch).
  virtual bool drafts_after_scheduling() const { return false; }
};

}  // namespace pagoda
