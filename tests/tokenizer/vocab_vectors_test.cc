// llama.cpp's test-tokenizer-0 vectors: every input of every vocabulary in
// shared/vocab must tokenize (no BOS, special tokens as text) to the expected
// ids, and decode back to the input.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "../shared_files.h"
#include "gguf/gguf_file.h"
#include "tokenizer/tokenizer.h"

namespace pagoda {
namespace {

const std::string kVocabDir = std::string(PAGODA_SHARED_DIR) + "/vocab/";
const char* const kVocabs[] = {
    "ggml-vocab-llama-spm.gguf", "ggml-vocab-phi-3.gguf",        "ggml-vocab-gpt-2.gguf",
    "ggml-vocab-starcoder.gguf", "ggml-vocab-deepseek-llm.gguf",
};

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Inputs: each is followed by "\n__ggml_vocab_test__\n".
std::vector<std::string> read_inputs(const std::string& path) {
  const std::string all = read_all(path);
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  size_t pos = 0;
  for (size_t hit; (hit = all.find(sep, pos)) != std::string::npos; pos = hit + sep.size()) {
    out.push_back(all.substr(pos, hit - pos));
  }
  return out;
}

std::vector<std::vector<int32_t>> read_outputs(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::vector<int32_t>> out;
  for (std::string line; std::getline(in, line);) {
    std::istringstream ls(line);
    std::vector<int32_t> ids;
    for (int32_t id; ls >> id;) ids.push_back(id);
    out.push_back(ids);
  }
  return out;
}

std::string join(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) {
    s += ' ';
    s += std::to_string(id);
  }
  return s;
}

std::unique_ptr<Tokenizer> load(const std::string& name) {
  auto f = gguf::GGUFFile::open(kVocabDir + name);
  EXPECT_TRUE(f.is_ok()) << name << ": " << f.status().message();
  if (!f.is_ok()) return nullptr;
  auto t = Tokenizer::from_gguf(**f);
  EXPECT_TRUE(t.is_ok()) << name << ": " << t.status().message();
  if (!t.is_ok()) return nullptr;
  return std::move(t).value();
}

class VocabVectors : public ::testing::TestWithParam<const char*> {};

TEST_P(VocabVectors, AllVectorsMatchAndRoundTrip) {
  const std::string name = GetParam();
  PAGODA_SKIP_WITHOUT_SHARED("vocab/" + name);
  const auto inputs = read_inputs(kVocabDir + name + ".inp");
  const auto outputs = read_outputs(kVocabDir + name + ".out");
  ASSERT_GT(inputs.size(), 40u);
  ASSERT_EQ(inputs.size(), outputs.size());
  auto tok = load(name);
  ASSERT_NE(tok, nullptr);
  size_t passed = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::vector<int32_t> ids = tok->encode(inputs[i], /*add_special=*/false, /*parse_special=*/false);
    EXPECT_EQ(join(ids), join(outputs[i])) << name << " vector " << i << ": '" << inputs[i] << "'";
    EXPECT_EQ(tok->decode(ids), inputs[i]) << name << " vector " << i;
    if (join(ids) == join(outputs[i])) ++passed;
  }
  std::printf("%s: %zu/%zu vectors passed\n", name.c_str(), passed, inputs.size());
}

INSTANTIATE_TEST_SUITE_P(AllVocabs, VocabVectors, ::testing::ValuesIn(kVocabs));

}  // namespace
}  // namespace pagoda
