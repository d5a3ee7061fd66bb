// Prompt-lookup / n-gram proposer (Saxena 2023; vLLM's "ngram"): finds the
// most recent earlier occurrence of the sequence's last n tokens, longest n
// first, and proposes the tokens that followed it. Free to run; strong on
// copy-heavy work (rewrite, quote, edit, code) where the answer repeats the
// prompt.
#pragma once

#include "spec/proposer.h"

namespace pagoda {

class NgramProposer : public Proposer {
 public:
  // Match lengths tried, longest first: max_n down to min_n (1 <= min <= max).
  NgramProposer(int32_t min_n, int32_t max_n);
  void propose(std::span<const int32_t> tokens, int32_t max_tokens, std::vector<int32_t>* draft) const override;

 private:
  int32_t min_n_;
  int32_t max_n_;
};

}  // namespace pagoda
