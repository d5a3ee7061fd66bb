// Synthetic workloads for `pagoda bench serve`: random prompts, a shared
// system prompt with distinct questions, and multi-turn conversations.
// Prompts are random common English words, about one token each; the real
// token counts come back from the server's usage chunk.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace pagoda::bench {

enum class Dataset { kRandom, kSharedPrefix, kMultiTurn };

struct WorkloadConfig {
  Dataset dataset = Dataset::kRandom;
  int32_t num_prompts = 100;  // conversations (one request each unless multi-turn)
  int32_t input_len = 256;    // words per user message (about tokens)
  int32_t output_len = 128;   // max_tokens per request
  double range_ratio = 0;     // lengths drawn from [len*(1-r), len*(1+r)]
  int32_t prefix_len = 256;   // shared-prefix: words in the shared system prompt
  int32_t turns = 3;          // multi-turn: user messages per conversation
  uint64_t seed = 0;
};

struct Turn {
  std::string user;
  int32_t input_words = 0;  // words in `user` (plus the system prompt on turn 0)
  int32_t output_len = 0;
};

struct Conversation {
  std::string system;  // "" unless shared-prefix
  std::vector<Turn> turns;
};

// `n` random words separated by spaces, starting with a capital letter.
std::string random_words(int32_t n, std::mt19937_64& rng);

// Deterministic for a given config (the seed).
std::vector<Conversation> make_workload(const WorkloadConfig& cfg);

}  // namespace pagoda::bench
