// libFuzzer target: untrusted structured-output constraints (GBNF text, a
// regex, a JSON Schema) through compilation, then the matcher over the same
// bytes, with the cached token mask checked against the reference mask at
// every step. Never a crash, hang or uncaught exception; an error always has
// a message.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/regex_to_gbnf.h"

namespace {

using namespace pagoda::grammar;

void check(bool ok) {
  if (!ok) std::abort();
}

const TokenVocab& vocab() {
  static const TokenVocab v = [] {
    std::vector<std::string> pieces;
    for (int b = 0; b < 256; ++b) pieces.emplace_back(1, static_cast<char>(b));
    for (const char* s : {"{\"", "\":", "\", \"", "true", "null", "ab", "abc", "[\"", "\"]", "é", "00", "-1"})
      pieces.emplace_back(s);
    pieces.emplace_back("");
    std::vector<bool> excluded(pieces.size(), false);
    return TokenVocab(std::move(pieces), excluded, {static_cast<int32_t>(256)});
  }();
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  pagoda::Result<std::string> gbnf = std::string();
  switch (data[0] % 4) {
    case 0: gbnf = text; break;
    case 1: gbnf = regex_gbnf(text); break;
    case 2: {
      auto r = regex_to_gbnf(text, RegexText::kJsonString);
      gbnf = r.is_ok() ? pagoda::Result<std::string>("root ::= " + *r) : r;
      break;
    }
    default: {
      const auto schema = nlohmann::ordered_json::parse(text, nullptr, false);
      if (schema.is_discarded()) return 0;
      gbnf = json_schema_to_gbnf(schema);
    }
  }
  if (!gbnf.is_ok()) {
    check(!gbnf.status().message().empty());
    return 0;
  }
  auto g = compile_gbnf(*gbnf);
  if (!g.is_ok()) {
    check(!g.status().message().empty());
    return 0;
  }
  Matcher m(*g);
  TokenMask fast, ref;
  for (size_t i = 0; i <= text.size() && i < 64; ++i) {
    m.fill_mask(vocab(), &fast);
    reference_mask(**g, m.stacks(), vocab(), &ref);
    check(fast == ref);
    if (i == text.size() || !m.accept_bytes(text.substr(i, 1))) break;
  }
  return 0;
}
