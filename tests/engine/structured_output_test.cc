// Structured output end to end with the bundled model, sampling at
// temperature 1: every output of 200 random JSON Schemas parses and validates
// (checked by the test's own validator, tests/grammar/schema_validator.h),
// every output of 50 random regexes / GBNF grammars matches (std::wregex);
// under speculative decoding and with n > 1 the constraint holds, and greedy
// outputs are those of speculation off.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "../grammar/random_regex.h"
#include "../grammar/random_schema.h"
#include "../grammar/schema_validator.h"
#include "engine/engine.h"
#include "grammar/json_schema.h"

namespace pagoda {
namespace {

using nlohmann::json;

const std::string kModel = std::string(PAGODA_SOURCE_DIR) + "/models/pagoda-small.gguf";

std::shared_ptr<const grammar::Grammar> compile(const Result<std::string>& gbnf) {
  EXPECT_TRUE(gbnf.is_ok()) << gbnf.status().message();
  if (!gbnf.is_ok()) return nullptr;
  auto g = grammar::compile_gbnf(gbnf.value());
  EXPECT_TRUE(g.is_ok()) << g.status().message() << "\n" << gbnf.value();
  return g.is_ok() ? *g : nullptr;
}

struct Finished {
  std::string text;
  FinishReason reason = FinishReason::kNone;
  std::vector<int32_t> tokens;
};

// Runs every request to the end; results by (request id, choice index).
std::map<std::pair<int64_t, int32_t>, Finished> run_all(Engine& e) {
  std::map<std::pair<int64_t, int32_t>, Finished> out;
  while (e.has_unfinished()) {
    for (const RequestOutput& o : e.step()) {
      Finished& f = out[{o.id.value, o.index}];
      f.text += o.text;
      f.tokens.insert(f.tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
      if (o.finished) f.reason = o.finish_reason;
    }
  }
  return out;
}

std::unique_ptr<Engine> bundled_engine(SpecMethod spec = SpecMethod::kNone) {
  EngineConfig cfg;
  cfg.num_threads = 2;
  cfg.sched.max_num_seqs = 64;
  cfg.spec_method = spec;
  if (spec != SpecMethod::kNone) cfg.num_spec_tokens = 4;
  auto e = Engine::create(kModel, cfg);
  EXPECT_TRUE(e.is_ok()) << e.status().message();
  return e.is_ok() ? std::move(e).value() : nullptr;
}

RequestSpec sampled(const Engine& e, const std::string& prompt, std::shared_ptr<const grammar::Grammar> g,
                    uint64_t seed) {
  RequestSpec s;
  s.prompt = e.tokenizer().encode(prompt, true, false);
  s.max_tokens = e.max_model_len() - static_cast<int32_t>(s.prompt.size());
  s.sampling.temperature = 1.0f;
  s.sampling.seed = seed;
  s.grammar = std::move(g);
  return s;
}

TEST(StructuredOutput, RandomSchemasSampledByTheBundledModelValidate) {
  auto engine = bundled_engine();
  ASSERT_TRUE(engine);
  Engine& e = *engine;
  std::mt19937 rng(2026);
  std::map<int64_t, json> schemas;
  for (int i = 0; i < 200; ++i) {
    const json schema = test::random_schema(rng);
    auto g = compile(grammar::json_schema_to_gbnf(nlohmann::ordered_json::parse(schema.dump())));
    ASSERT_TRUE(g) << schema.dump();
    auto id = e.add_request(sampled(e, "The answer, as JSON:", g, 1000 + static_cast<uint64_t>(i)));
    ASSERT_TRUE(id.is_ok()) << id.status().message();
    schemas[id->value] = schema;
  }
  const auto results = run_all(e);
  ASSERT_EQ(results.size(), 200u);
  int64_t chars = 0;
  for (const auto& [key, f] : results) {
    const json& schema = schemas.at(key.first);
    ASSERT_EQ(f.reason, FinishReason::kStop) << "did not finish: " << f.text << "\n" << schema.dump();
    json value;
    try {
      value = json::parse(f.text);
    } catch (const json::exception&) {
      FAIL() << "not JSON: " << f.text << "\nschema: " << schema.dump();
    }
    std::string why;
    EXPECT_TRUE(test::validate_json(schema, value, &why)) << why << "\n" << f.text << "\nschema: " << schema.dump();
    chars += static_cast<int64_t>(f.text.size());
  }
  EXPECT_GT(chars, 200 * 4);  // not just empty objects
  EXPECT_GT(e.stats().num_grammar_masks, 200);
}

TEST(StructuredOutput, RandomRegexesAndGrammarsSampledByTheBundledModelMatch) {
  auto engine = bundled_engine();
  ASSERT_TRUE(engine);
  Engine& e = *engine;
  std::mt19937 rng(99);
  std::map<int64_t, std::string> regexes;
  for (int i = 0; i < 50; ++i) {
    const test::RegexCase c = test::random_regex_case(rng);
    // Half through our regex conversion, half as the GBNF the test wrote.
    auto g = compile(i % 2 ? grammar::regex_gbnf(c.regex) : Result<std::string>(c.gbnf));
    ASSERT_TRUE(g) << c.regex;
    auto id = e.add_request(sampled(e, "Once upon a time", g, 7 + static_cast<uint64_t>(i)));
    ASSERT_TRUE(id.is_ok());
    regexes[id->value] = c.regex;
  }
  for (const auto& [key, f] : run_all(e)) {
    const std::string& re = regexes.at(key.first);
    EXPECT_EQ(f.reason, FinishReason::kStop) << re;
    EXPECT_TRUE(test::regex_full_match(re, f.text)) << "regex " << re << " vs \"" << f.text << "\"";
  }
}

TEST(StructuredOutput, ChoicesAndParallelSamplesStayInTheLanguage) {
  auto engine = bundled_engine();
  ASSERT_TRUE(engine);
  Engine& e = *engine;
  const std::vector<std::string> choices = {"yes", "no", "maybe so", "It is the LORD"};
  RequestSpec s = sampled(e, "Is it true?", compile(grammar::choice_to_gbnf(choices)), 5);
  s.n = 16;
  ASSERT_TRUE(e.add_request(s).is_ok());
  const auto results = run_all(e);
  ASSERT_EQ(results.size(), 16u);
  std::map<std::string, int> seen;
  for (const auto& [key, f] : results) {
    EXPECT_EQ(f.reason, FinishReason::kStop);
    EXPECT_NE(std::find(choices.begin(), choices.end(), f.text), choices.end()) << f.text;
    ++seen[f.text];
  }
  EXPECT_GE(seen.size(), 2u);  // the choices are sampled, not all the same
}

// Greedy decoding under a grammar with n-gram speculation gives the tokens of
// speculation off (drafts the grammar refuses are cut; rows are masked before
// verification), and drafts were verified and accepted.
TEST(StructuredOutput, SpeculationUnderAGrammarIsLossless) {
  const std::vector<std::string> prompts = {
      "In the beginning God created the heaven and the earth. In the beginning God created",
      "And God said, Let there be light: and there was light. And God said, Let there be",
      "The meaning of the word is the meaning of the"};
  const std::string gbnf = "root ::= \"\\\"\" [^\"\\\\\\x00-\\x1F]{1,60} \"\\\"\" \" is the answer.\"\n";
  std::map<std::pair<int64_t, int32_t>, Finished> plain, spec;
  for (SpecMethod m : {SpecMethod::kNone, SpecMethod::kNgram}) {
    auto engine = bundled_engine(m);
    ASSERT_TRUE(engine);
    auto g = compile(Result<std::string>(gbnf));
    ASSERT_TRUE(g);
    for (const std::string& p : prompts) {
      RequestSpec s = sampled(*engine, p, g, 1);
      s.sampling.temperature = 0;
      ASSERT_TRUE(engine->add_request(s).is_ok());
    }
    (m == SpecMethod::kNone ? plain : spec) = run_all(*engine);
    if (m == SpecMethod::kNgram) {
      EXPECT_GT(engine->stats().num_draft_tokens, 0);
      EXPECT_GT(engine->stats().num_accepted_draft_tokens, 0);
    }
  }
  ASSERT_EQ(plain.size(), prompts.size());
  for (const auto& [key, f] : plain) {
    EXPECT_EQ(spec.at(key).tokens, f.tokens) << f.text;
    EXPECT_EQ(f.reason, FinishReason::kStop) << f.text;
    EXPECT_EQ(f.text.front(), '"') << f.text;
    EXPECT_NE(f.text.find("\" is the answer."), std::string::npos) << f.text;
  }
}

TEST(StructuredOutput, BeamSearchWithAGrammarIsRefused) {
  auto engine = bundled_engine();
  ASSERT_TRUE(engine);
  RequestSpec s = sampled(*engine, "x", compile(Result<std::string>(grammar::json_object_gbnf())), 1);
  s.use_beam_search = true;
  s.beam_width = 2;
  auto r = engine->add_request(s);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("beam search"), std::string::npos);
}

}  // namespace
}  // namespace pagoda
