#include "bench_client/workload.h"

#include <algorithm>
#include <cmath>

namespace pagoda::bench {
namespace {

// Short, frequent words: each is a single token in common BPE vocabularies.
constexpr const char* kWords[] = {
    "the",     "of",     "and",    "to",     "in",      "is",     "was",     "for",   "on",     "are",    "with",
    "as",      "at",     "be",     "this",   "have",    "from",   "or",      "one",   "had",    "by",     "word",
    "but",     "not",    "what",   "all",    "were",    "we",     "when",    "your",  "can",    "said",   "there",
    "use",     "an",     "each",   "which",  "she",     "do",     "how",     "their", "if",     "will",   "up",
    "other",   "about",  "out",    "many",   "then",    "them",   "these",   "so",    "some",   "her",    "would",
    "make",    "like",   "him",    "into",   "time",    "has",    "look",    "two",   "more",   "write",  "go",
    "see",     "number", "no",     "way",    "could",   "people", "my",      "than",  "first",  "water",  "been",
    "call",    "who",    "oil",    "its",    "now",     "find",   "long",    "down",  "day",    "did",    "get",
    "come",    "made",   "may",    "part",   "over",    "new",    "sound",   "take",  "only",   "little", "work",
    "know",    "place",  "year",   "live",   "me",      "back",   "give",    "most",  "very",   "after",  "thing",
    "our",     "just",   "name",   "good",   "man",     "think",  "say",     "great", "where",  "help",   "line",
    "right",   "too",    "mean",   "old",    "any",     "same",   "tell",    "boy",   "follow", "came",   "want",
    "show",    "also",   "around", "form",   "three",   "small",  "set",     "put",   "end",    "does",   "another",
    "well",    "large",  "must",   "big",    "even",    "such",   "because", "turn",  "here",   "why",    "ask",
    "went",    "men",    "read",   "need",   "land",    "home",   "us",      "move",  "try",    "kind",   "hand",
    "picture", "again",  "change", "off",    "play",    "spell",  "air",     "away",  "animal", "house",  "point",
    "page",    "letter", "mother", "answer", "found",   "study",  "still",   "learn", "should", "world",  "high",
    "every",   "near",   "add",    "food",   "between",
};
constexpr size_t kNumWords = sizeof(kWords) / sizeof(kWords[0]);

int32_t draw_len(int32_t len, double ratio, std::mt19937_64& rng) {
  if (ratio <= 0) return len;
  const auto lo = std::max<int32_t>(1, static_cast<int32_t>(std::floor(len * (1 - ratio))));
  const auto hi = std::max<int32_t>(lo, static_cast<int32_t>(std::ceil(len * (1 + ratio))));
  return std::uniform_int_distribution<int32_t>(lo, hi)(rng);
}

}  // namespace

std::string random_words(int32_t n, std::mt19937_64& rng) {
  std::string out;
  out.reserve(static_cast<size_t>(std::max(n, 0)) * 6);
  for (int32_t i = 0; i < n; ++i) {
    if (i) out += ' ';
    out += kWords[rng() % kNumWords];
  }
  if (!out.empty()) out[0] = static_cast<char>(out[0] - 'a' + 'A');
  return out;
}

std::vector<Conversation> make_workload(const WorkloadConfig& cfg) {
  std::mt19937_64 rng(cfg.seed);
  std::vector<Conversation> out(static_cast<size_t>(std::max(cfg.num_prompts, 0)));
  std::string system;
  if (cfg.dataset == Dataset::kSharedPrefix) system = random_words(cfg.prefix_len, rng);
  const int32_t turns = cfg.dataset == Dataset::kMultiTurn ? std::max(cfg.turns, 1) : 1;
  for (Conversation& c : out) {
    c.system = system;
    for (int32_t t = 0; t < turns; ++t) {
      Turn turn;
      turn.input_words = draw_len(cfg.input_len, cfg.range_ratio, rng);
      turn.output_len = draw_len(cfg.output_len, cfg.range_ratio, rng);
      turn.user = random_words(turn.input_words, rng);
      if (t == 0 && !system.empty()) turn.input_words += cfg.prefix_len;
      c.turns.push_back(std::move(turn));
    }
  }
  return out;
}

}  // namespace pagoda::bench
