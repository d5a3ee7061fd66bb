#include "testing/builtin_vocab.h"

#include <array>
#include <climits>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace pagoda {
namespace {

// Plain English written for this file; BPE merges are learned from it so the
// small vocabularies hold common English pieces.
constexpr std::string_view kSeedText =
    "Once upon a time there was a little town by the sea. In the town lived a "
    "girl who liked to walk along the water every morning. She would look for "
    "shells, and when she found one that was bright and smooth, she put it in "
    "her pocket and took it home. Her mother said that the house was full of "
    "shells, but the girl only laughed and went out again the next day.\n"
    "One day the wind was very strong and the waves were high. The girl saw a "
    "small boat near the rocks. A boy was in the boat, and he was trying to "
    "pull it back to the beach. She ran to help him, and together they pulled "
    "the boat onto the sand. The boy thanked her and said his name was Tom. "
    "They became good friends, and after that they walked along the water "
    "together every morning, looking for shells and talking about the ships "
    "that came into the harbor.\n"
    "The people of the town worked hard. Some of them were fishermen who went "
    "out before the sun came up, and some of them made bread, shoes or tables. "
    "The baker opened his shop at six o'clock, and the children would stop "
    "there on the way to school to buy a warm roll. In the evening the "
    "families sat together, ate their dinner and told stories about the old "
    "days, when the winters were longer and the nights were darker.\n"
    "When you write a program, you should think about the data first. The "
    "data tells you what the program has to do, and the code only follows. "
    "A good function does one thing and does it well; its name says what it "
    "does, and its tests show that it works. If a test fails, read the "
    "message, find the smallest input that still fails, and then fix the "
    "reason, not the symptom. Numbers such as 1, 2, 3, 10, 42, 100, 256 and "
    "2048 appear often in computing, because memory is counted in powers of "
    "two and people like round values.\n"
    "Learning takes time. Every student starts with simple questions: what is "
    "this, how does it work, and why is it made this way? Then the questions "
    "become harder and the answers become more interesting. A teacher who "
    "listens carefully can help a student find the answer without giving it "
    "away, and that is the best kind of help there is.\n"
    "The weather changed slowly through the year. In spring the trees turned "
    "green and the birds returned; in summer the days were long and warm; in "
    "autumn the leaves fell and the rain came back; and in winter the snow "
    "covered the hills while everyone stayed inside by the fire, reading "
    "books and drinking hot tea. \"What a beautiful place,\" said a visitor "
    "once. \"I would like to stay here forever.\"\n";

std::array<std::string, 256> make_byte_table() {
  auto printable = [](int x) { return (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255); };
  std::array<std::string, 256> table;
  int next_extra = 0;
  for (int b = 0; b < 256; ++b) {
    const uint32_t cp = printable(b) ? static_cast<uint32_t>(b) : 256u + next_extra++;
    std::string s;
    if (cp < 0x80) {
      s.push_back(static_cast<char>(cp));
    } else {  // every code point here is below 0x800: two UTF-8 bytes
      s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    table[b] = std::move(s);
  }
  return table;
}

const std::array<std::string, 256>& byte_table() {
  static const std::array<std::string, 256> kTable = make_byte_table();
  return kTable;
}

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// Grows a vocabulary one merge at a time, accepting a merge only when it makes
// a new token that BPE reaches from its own bytes.
class VocabBuilder {
 public:
  explicit VocabBuilder(int64_t vocab_size) : n_vocab_(vocab_size) {
    add_token("", "<unk>", TokenType::kUnknown);
    add_token("", "<s>", TokenType::kControl);
    add_token("", "</s>", TokenType::kControl);
    for (int b = 0; b < 256; ++b) {
      add_token(std::string(1, static_cast<char>(b)), byte_table()[b], TokenType::kNormal);
    }
  }

  bool full() const { return static_cast<int64_t>(raw_.size()) >= n_vocab_; }
  int32_t size() const { return static_cast<int32_t>(raw_.size()); }

  // Adds merge (a, b) -> a+b when a+b is not a token yet and BPE over the
  // bytes of a+b with the current merges stops at exactly [a, b]. The new
  // merge has the lowest priority, so no earlier token's encoding changes.
  bool try_merge(int32_t a, int32_t b) {
    if (full()) return false;
    std::string raw = raw_[a] + raw_[b];
    if (by_raw_.count(raw)) return false;
    std::string text = out_.tokens[a] + out_.tokens[b];
    for (int32_t k = 0; k < kBuiltinVocabFirstByte; ++k) {
      if (out_.tokens[k] == text) return false;  // keep token strings unique
    }
    const std::vector<int32_t> ids = encode(raw);
    if (ids.size() != 2 || ids[0] != a || ids[1] != b) return false;
    const int32_t id = size();
    rules_.emplace(pair_key(a, b), std::make_pair(static_cast<int32_t>(out_.merges.size()), id));
    out_.merges.push_back(out_.tokens[a] + " " + out_.tokens[b]);
    add_token(std::move(raw), std::move(text), TokenType::kNormal);
    return true;
  }

  std::vector<int32_t> encode(const std::string& raw) const {
    std::vector<int32_t> ids;
    ids.reserve(raw.size());
    for (unsigned char c : raw) ids.push_back(kBuiltinVocabFirstByte + c);
    while (ids.size() > 1) {
      int32_t best_rank = INT32_MAX, best_id = -1;
      size_t best_pos = 0;
      for (size_t k = 0; k + 1 < ids.size(); ++k) {
        auto it = rules_.find(pair_key(ids[k], ids[k + 1]));
        if (it != rules_.end() && it->second.first < best_rank) {
          best_rank = it->second.first;
          best_id = it->second.second;
          best_pos = k;
        }
      }
      if (best_id < 0) break;
      ids[best_pos] = best_id;
      ids.erase(ids.begin() + static_cast<std::ptrdiff_t>(best_pos) + 1);
    }
    return ids;
  }

  BuiltinVocab take() { return std::move(out_); }

 private:
  void add_token(std::string raw, std::string text, TokenType type) {
    if (!raw.empty()) by_raw_.emplace(raw, size());
    raw_.push_back(std::move(raw));
    out_.tokens.push_back(std::move(text));
    out_.token_types.push_back(static_cast<int32_t>(type));
  }

  int64_t n_vocab_;
  std::vector<std::string> raw_;  // the bytes each token stands for
  std::unordered_map<std::string, int32_t> by_raw_;
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> rules_;  // pair -> (rank, token)
  BuiltinVocab out_;
};

enum class CharClass { kLetter, kDigit, kSpace, kOther };

CharClass char_class(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return CharClass::kLetter;
  if (c >= '0' && c <= '9') return CharClass::kDigit;
  if (c == ' ' || c == '\n' || c == '\t') return CharClass::kSpace;
  return CharClass::kOther;
}

// GPT-2-like pre-tokenization: an optional leading space plus a run of one
// character class; other whitespace runs stand alone.
std::unordered_map<std::string, int64_t> count_words(std::string_view text) {
  std::unordered_map<std::string, int64_t> counts;
  size_t p = 0;
  while (p < text.size()) {
    size_t start = p;
    if (text[p] == ' ' && p + 1 < text.size() && char_class(text[p + 1]) != CharClass::kSpace) ++p;
    const CharClass cls = char_class(text[p]);
    while (p < text.size() && char_class(text[p]) == cls) ++p;
    ++counts[std::string(text.substr(start, p - start))];
  }
  return counts;
}

// Classic BPE training on the seed text: repeatedly merge the most frequent
// adjacent pair (ties: smallest ids) while it occurs at least twice.
void learn_seed_merges(VocabBuilder& vb) {
  std::vector<std::pair<std::vector<int32_t>, int64_t>> words;
  for (const auto& [w, n] : count_words(kSeedText)) {
    std::vector<int32_t> ids;
    for (unsigned char c : w) ids.push_back(kBuiltinVocabFirstByte + c);
    words.emplace_back(std::move(ids), n);
  }
  std::unordered_set<uint64_t> rejected;
  while (!vb.full()) {
    std::unordered_map<uint64_t, int64_t> pair_counts;
    for (const auto& [ids, n] : words) {
      for (size_t k = 0; k + 1 < ids.size(); ++k) pair_counts[pair_key(ids[k], ids[k + 1])] += n;
    }
    uint64_t best = 0;
    int64_t best_count = 0;
    for (const auto& [key, n] : pair_counts) {
      if (rejected.count(key)) continue;
      if (n > best_count || (n == best_count && key < best)) best = key, best_count = n;
    }
    if (best_count < 2) break;
    const auto a = static_cast<int32_t>(best >> 32), b = static_cast<int32_t>(best & 0xffffffffu);
    if (!vb.try_merge(a, b)) {
      rejected.insert(best);
      continue;
    }
    const int32_t merged = vb.size() - 1;
    for (auto& [ids, n] : words) {
      std::vector<int32_t> next;
      next.reserve(ids.size());
      for (size_t k = 0; k < ids.size(); ++k) {
        if (k + 1 < ids.size() && ids[k] == a && ids[k + 1] == b) {
          next.push_back(merged);
          ++k;
        } else {
          next.push_back(ids[k]);
        }
      }
      ids = std::move(next);
    }
  }
}

// Fills the rest with token + letter merges in id order; when the letters run
// out of new tokens to extend, any token + any byte.
void add_synthetic_merges(VocabBuilder& vb) {
  std::vector<int32_t> suffixes;
  for (char c = 'a'; c <= 'z'; ++c) suffixes.push_back(kBuiltinVocabFirstByte + c);
  int32_t base =
      vb.size() > kBuiltinVocabMinSize ? static_cast<int32_t>(kBuiltinVocabMinSize) : kBuiltinVocabFirstByte + 'a';
  bool all_bytes = false;
  while (!vb.full()) {
    if (base >= vb.size()) {
      if (all_bytes) break;  // cannot happen: token x byte pairs outnumber any vocab
      all_bytes = true;
      suffixes.clear();
      for (int b = 0; b < 256; ++b) suffixes.push_back(kBuiltinVocabFirstByte + b);
      base = kBuiltinVocabFirstByte;
    }
    for (int32_t s : suffixes) {
      if (vb.full()) break;
      vb.try_merge(base, s);
    }
    ++base;
  }
}

}  // namespace

std::string gpt2_byte_to_unicode(uint8_t b) { return byte_table()[b]; }

Result<BuiltinVocab> make_builtin_vocab(int64_t vocab_size) {
  if (vocab_size < kBuiltinVocabMinSize) {
    return invalid_argument("the built-in vocabulary needs vocab_size >= " + std::to_string(kBuiltinVocabMinSize) +
                            " (3 special + 256 byte tokens), got " + std::to_string(vocab_size));
  }
  if (vocab_size > (1 << 20)) {
    return invalid_argument("the built-in vocabulary supports vocab_size <= 1048576, got " +
                            std::to_string(vocab_size));
  }
  VocabBuilder vb(vocab_size);
  learn_seed_merges(vb);
  add_synthetic_merges(vb);
  if (!vb.full()) return internal_error("built-in vocabulary: ran out of merge candidates");
  return vb.take();
}

}  // namespace pagoda
