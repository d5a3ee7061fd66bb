// Structured-output token mask cost on a real vocabulary, without a model:
// random walks through a JSON Schema's grammar (tokens drawn uniformly from
// the allowed ones), timing each fill_mask; the first walk fills the mask
// cache (cold), the rest reuse it (warm).
//   grammar_mask_bench VOCAB.gguf SCHEMA.json [walks]
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "gguf/gguf_file.h"
#include "grammar/json_schema.h"
#include "grammar/mask_cache.h"
#include "grammar/matcher.h"
#include "tokenizer/tokenizer.h"

using namespace pagoda;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: grammar_mask_bench VOCAB.gguf SCHEMA.json [walks]\n");
    return 2;
  }
  const int walks = argc > 3 ? std::atoi(argv[3]) : 20;
  auto file = gguf::GGUFFile::open(argv[1]);
  if (!file) return std::fprintf(stderr, "%s\n", file.status().message().c_str()), 1;
  auto tok = Tokenizer::from_gguf(**file);
  if (!tok) return std::fprintf(stderr, "%s\n", tok.status().message().c_str()), 1;
  std::ifstream in(argv[2]);
  std::stringstream ss;
  ss << in.rdbuf();
  auto gbnf = grammar::json_schema_to_gbnf(nlohmann::ordered_json::parse(ss.str()));
  if (!gbnf) return std::fprintf(stderr, "%s\n", gbnf.status().message().c_str()), 1;
  auto g = grammar::compile_gbnf(*gbnf);
  if (!g) return std::fprintf(stderr, "%s\n", g.status().message().c_str()), 1;

  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  const int32_t n = (*tok)->vocab_size();
  std::vector<std::string> pieces(static_cast<size_t>(n));
  std::vector<bool> excluded(static_cast<size_t>(n));
  std::vector<int32_t> ends;
  for (int32_t t = 0; t < n; ++t) {
    pieces[static_cast<size_t>(t)] = (*tok)->token_to_piece(t);
    excluded[static_cast<size_t>(t)] = (*tok)->is_control(t) || (*tok)->is_eog(t);
    if ((*tok)->is_eog(t)) ends.push_back(t);
  }
  const grammar::TokenVocab vocab(std::move(pieces), excluded, ends);
  const double trie_s = std::chrono::duration<double>(clock::now() - t0).count();

  std::mt19937 rng(1);
  double cold_s = 0, warm_s = 0, worst_warm = 0;
  int64_t cold_masks = 0, warm_masks = 0, tokens = 0;
  grammar::TokenMask mask;
  for (int w = 0; w < walks; ++w) {
    grammar::Matcher m(*g);
    for (int step = 0; step < 400 && !m.is_finished(); ++step) {
      const auto s = clock::now();
      m.fill_mask(vocab, &mask);
      const double dt = std::chrono::duration<double>(clock::now() - s).count();
      (w == 0 ? cold_s : warm_s) += dt;
      ++(w == 0 ? cold_masks : warm_masks);
      if (w > 0) worst_warm = std::max(worst_warm, dt);
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t < vocab.size(); ++t) {
        if (grammar::mask_has(mask, t)) allowed.push_back(t);
      }
      if (allowed.empty()) return std::fprintf(stderr, "dead end\n"), 1;
      const int32_t t = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
      if (!m.accept_token(vocab, t)) return std::fprintf(stderr, "refused\n"), 1;
      ++tokens;
      if (std::find(ends.begin(), ends.end(), t) != ends.end()) break;
    }
  }
  nlohmann::json j = {{"vocab_size", n},
                      {"trie_build_ms", 1e3 * trie_s},
                      {"cache_entries", grammar::mask_cache(**g).size()},
                      {"cold_masks", cold_masks},
                      {"cold_us_per_mask", 1e6 * cold_s / std::max<int64_t>(cold_masks, 1)},
                      {"warm_masks", warm_masks},
                      {"warm_us_per_mask", 1e6 * warm_s / std::max<int64_t>(warm_masks, 1)},
                      {"warm_worst_us", 1e6 * worst_warm},
                      {"tokens", tokens}};
  std::printf("%s\n", j.dump(2).c_str());
  return 0;
}
