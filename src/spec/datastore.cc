#include "spec/datastore.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <numeric>

#include "core/check.h"

namespace pagoda {
namespace {

constexpr char kMagic[8] = {'P', 'G', 'D', 'S', 'T', 'O', 'R', 'E'};
constexpr uint32_t kVersion = 1;
constexpr int64_t kMaxTokens = int64_t{1} << 30;
constexpr size_t kMaxPattern = 64;  // longest lookup (RetrievalProposer's max_n is at most this)

struct Header {
  char magic[8];
  uint32_t version;
  int32_t vocab_size;
  int64_t num_tokens;
};

}  // namespace

Result<std::unique_ptr<Datastore>> Datastore::build(std::vector<int32_t> tokens, int32_t vocab_size) {
  if (vocab_size < 1) return invalid_argument("datastore: vocabulary size must be positive");
  if (static_cast<int64_t>(tokens.size()) > kMaxTokens) return invalid_argument("datastore: corpus too large");
  for (int32_t t : tokens)
    if (t < 0 || t >= vocab_size) return invalid_argument("datastore: token id out of range");
  std::unique_ptr<Datastore> d(new Datastore());
  d->vocab_size_ = vocab_size;
  d->tokens_ = std::move(tokens);
  const auto n = static_cast<int64_t>(d->tokens_.size());
  // Prefix doubling: rank[i] orders suffixes by their first 2^k tokens.
  std::vector<int32_t>& sa = d->sa_;
  sa.resize(n);
  std::iota(sa.begin(), sa.end(), 0);
  std::vector<int64_t> rank(d->tokens_.begin(), d->tokens_.end()), tmp(n);
  for (int64_t k = 1;; k <<= 1) {
    auto key = [&](int32_t i) { return std::make_pair(rank[i], i + k < n ? rank[i + k] : int64_t{-1}); };
    std::sort(sa.begin(), sa.end(), [&](int32_t a, int32_t b) { return key(a) < key(b); });
    if (n == 0) break;
    tmp[sa[0]] = 0;
    for (int64_t i = 1; i < n; ++i) tmp[sa[i]] = tmp[sa[i - 1]] + (key(sa[i - 1]) < key(sa[i]) ? 1 : 0);
    rank.swap(tmp);
    if (rank[sa[n - 1]] == n - 1 || k >= n) break;
  }
  return d;
}

int Datastore::compare(int64_t pos, std::span<const int32_t> pattern) const {
  const auto n = static_cast<int64_t>(tokens_.size());
  for (size_t j = 0; j < pattern.size(); ++j) {
    if (pos + static_cast<int64_t>(j) >= n) return -1;  // the suffix ends first
    const int32_t t = tokens_[pos + j];
    if (t != pattern[j]) return t < pattern[j] ? -1 : 1;
  }
  return 0;
}

std::pair<int64_t, int64_t> Datastore::find(std::span<const int32_t> pattern) const {
  auto lo = std::partition_point(sa_.begin(), sa_.end(), [&](int32_t p) { return compare(p, pattern) < 0; });
  auto hi = std::partition_point(lo, sa_.end(), [&](int32_t p) { return compare(p, pattern) == 0; });
  return {lo - sa_.begin(), hi - sa_.begin()};
}

Status Datastore::save(const std::string& path) const {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return invalid_argument("cannot write '" + path + "'");
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof(kMagic));
  h.version = kVersion;
  h.vocab_size = vocab_size_;
  h.num_tokens = num_tokens();
  f.write(reinterpret_cast<const char*>(&h), sizeof(h));
  f.write(reinterpret_cast<const char*>(tokens_.data()), static_cast<std::streamsize>(tokens_.size() * 4));
  f.write(reinterpret_cast<const char*>(sa_.data()), static_cast<std::streamsize>(sa_.size() * 4));
  if (!f) return invalid_argument("writing '" + path + "' failed");
  return Status::ok();
}

Result<std::unique_ptr<Datastore>> Datastore::load(const std::string& path, int32_t vocab_size) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return invalid_argument("cannot read datastore '" + path + "'");
  const std::string name = "datastore '" + path + "': ";
  Header h{};
  if (!f.read(reinterpret_cast<char*>(&h), sizeof(h))) return invalid_argument(name + "truncated header");
  if (std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0) return invalid_argument(name + "not a Pagoda datastore");
  if (h.version != kVersion) return invalid_argument(name + "unsupported version " + std::to_string(h.version));
  if (h.vocab_size != vocab_size)
    return invalid_argument(name + "built for a vocabulary of " + std::to_string(h.vocab_size) +
                            " tokens, the model has " + std::to_string(vocab_size));
  if (h.num_tokens < 0 || h.num_tokens > kMaxTokens) return invalid_argument(name + "bad token count");
  f.seekg(0, std::ios::end);
  const auto size = static_cast<int64_t>(f.tellg());
  if (size != static_cast<int64_t>(sizeof(h)) + 8 * h.num_tokens)
    return invalid_argument(name + "size does not match its token count (truncated or corrupt)");
  f.seekg(sizeof(h));
  std::unique_ptr<Datastore> d(new Datastore());
  d->vocab_size_ = vocab_size;
  d->tokens_.resize(h.num_tokens);
  d->sa_.resize(h.num_tokens);
  f.read(reinterpret_cast<char*>(d->tokens_.data()), h.num_tokens * 4);
  f.read(reinterpret_cast<char*>(d->sa_.data()), h.num_tokens * 4);
  if (!f) return invalid_argument(name + "read failed");
  for (int32_t t : d->tokens_)
    if (t < 0 || t >= vocab_size) return invalid_argument(name + "token id out of range");
  // The suffix array must be a permutation in sorted suffix order: lookups
  // binary-search it.
  std::vector<bool> seen(h.num_tokens, false);
  for (int32_t p : d->sa_) {
    if (p < 0 || p >= h.num_tokens || seen[p]) return invalid_argument(name + "corrupt suffix array");
    seen[p] = true;
  }
  // Lookups use patterns of at most kMaxPattern tokens, so order on that
  // prefix is what binary search needs (and bounds the check's cost).
  const std::span<const int32_t> all(d->tokens_);
  for (int64_t i = 1; i < h.num_tokens; ++i) {
    const auto a = all.subspan(d->sa_[i - 1]).first(std::min<size_t>(kMaxPattern, h.num_tokens - d->sa_[i - 1]));
    const auto b = all.subspan(d->sa_[i]).first(std::min<size_t>(kMaxPattern, h.num_tokens - d->sa_[i]));
    if (std::lexicographical_compare(b.begin(), b.end(), a.begin(), a.end()))
      return invalid_argument(name + "suffix array is not sorted");
  }
  return d;
}

RetrievalProposer::RetrievalProposer(std::shared_ptr<const Datastore> store, int32_t min_n, int32_t max_n)
    : store_(std::move(store)), min_n_(min_n), max_n_(max_n) {
  PAGODA_CHECK(store_ && min_n >= 1 && min_n <= max_n && static_cast<size_t>(max_n) <= kMaxPattern);
}

void RetrievalProposer::propose(std::span<const int32_t> tokens, int32_t max_tokens,
                                std::vector<int32_t>* draft) const {
  draft->clear();
  if (max_tokens <= 0) return;
  const auto corpus = store_->tokens();
  for (auto n = static_cast<int32_t>(std::min<size_t>(max_n_, tokens.size())); n >= min_n_; --n) {
    const auto [begin, end] = store_->find(tokens.last(static_cast<size_t>(n)));
    if (begin == end) continue;
    // Of (at most 256) matches, continue the one whose next token is the
    // most frequent; ties go to the first in suffix order (deterministic).
    std::map<int32_t, int32_t> votes;
    int64_t best = -1;
    int32_t best_votes = 0;
    for (int64_t i = begin; i < std::min<int64_t>(end, begin + 256); ++i) {
      const int64_t next = store_->position(i) + n;
      if (next >= static_cast<int64_t>(corpus.size())) continue;
      const int32_t v = ++votes[corpus[next]];
      if (v > best_votes) {
        best_votes = v;
        best = next;
      }
    }
    if (best < 0) continue;
    const int64_t to = std::min<int64_t>(static_cast<int64_t>(corpus.size()), best + max_tokens);
    draft->assign(corpus.begin() + best, corpus.begin() + to);
    return;
  }
}

}  // namespace pagoda
