// paged_attention on every ISA the host supports (cpu::set_active_isa)
// against the double-precision reference on random inputs of awkward
// shapes, with shuffled block tables. Query tiles below a per-ISA row
// threshold (4 to 16 rows) take the per-key dot path, larger ones the
// transposed-key path (cpu/attention_inl.h): both run on every ISA here.
#include "kernels/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/fp16.h"
#include "kernels/cpu/isa.h"
#include "kernels/ref/attention_ref.h"

namespace pagoda::kernels {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kSentinel = -12345.0f;

struct Case {
  int32_t head_dim;
  int32_t n_heads;
  int32_t num_kv_heads;
  int32_t block_size;
  int32_t kv_len;
  std::vector<int32_t> q_pos;
  float q_gain = 1.0f;              // > 1 makes scores large and the softmax peaky
  DType dtype = DType::kF32;        // the cache's format (the reference reads the same rows)
  int32_t window = 0;               // sliding window (0: none)
  bool free_before_window = false;  // blocks before every query's window are -1 in the table (KV groups)
  bool sinks = false;               // random per-head sink logits
  int32_t tree_begin = 0;           // tree attention (AttentionOptions), with tree_mask per query
  std::vector<uint64_t> tree_mask = {};
  std::string describe() const {
    char buf[240];
    std::snprintf(buf, sizeof buf, "hd=%d heads=%d/%d bs=%d kv_len=%d n_q=%zu first_pos=%d gain=%g %s window=%d%s",
                  head_dim, n_heads, num_kv_heads, block_size, kv_len, q_pos.size(), q_pos.empty() ? -1 : q_pos[0],
                  q_gain, dtype_name(dtype).data(), window, sinks ? " sinks" : "");
    return std::string(buf) + (tree_mask.empty() ? "" : " tree_begin=" + std::to_string(tree_begin));
  }
};

// A paged cache holding kv_len keys in shuffled blocks. Blocks outside the
// table and slots past kv_len hold NaN (all-ones bytes: a NaN scale in
// quantized rows), so reading them poisons the output.
struct Fixture {
  PagedKVView view;
  std::vector<float> k, v;  // the f32 values, `stride` floats a block
  size_t stride = 0;
  std::vector<uint8_t> kq, vq;  // the rows in Case::dtype when not f32
  std::vector<BlockId> table;

  Fixture(const Case& c, std::mt19937& rng) {
    const int32_t n_used = (c.kv_len + c.block_size - 1) / c.block_size;
    const int32_t n_blocks = n_used + 3;
    stride = static_cast<size_t>(c.num_kv_heads) * c.block_size * c.head_dim;
    k.assign(stride * n_blocks, kNaN);
    v.assign(stride * n_blocks, kNaN);
    std::vector<int32_t> perm(n_blocks);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int32_t i = 0; i < n_used; ++i) table.push_back(BlockId{perm[i]});
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int32_t j = 0; j < c.kv_len; ++j) {
      for (int32_t h = 0; h < c.num_kv_heads; ++h) {
        size_t off = table[j / c.block_size].value * stride +
                     (static_cast<size_t>(h) * c.block_size + j % c.block_size) * c.head_dim;
        for (int32_t d = 0; d < c.head_dim; ++d) {
          k[off + d] = u(rng);
          v[off + d] = u(rng);
        }
      }
    }
    view = PagedKVView{k.data(), v.data(), c.block_size, c.num_kv_heads, c.head_dim};
    if (c.dtype != DType::kF32) {
      const size_t rb = kv_row_bytes(c.dtype, c.head_dim);
      const size_t rows = k.size() / c.head_dim;
      kq.assign(rows * rb, 0xFF);
      vq.assign(rows * rb, 0xFF);
      for (size_t r = 0; r < rows; ++r) {
        if (std::isnan(k[r * c.head_dim])) continue;
        store_kv_row(c.dtype, &k[r * c.head_dim], c.head_dim, &kq[r * rb]);
        store_kv_row(c.dtype, &v[r * c.head_dim], c.head_dim, &vq[r * rb]);
      }
      view = PagedKVView{kq.data(), vq.data(), c.block_size, c.num_kv_heads, c.head_dim, c.dtype};
    }
  }
};

// Restores the best ISA when a test ends (a failed one included).
class PagedAttention : public ::testing::Test {
 protected:
  void TearDown() override { cpu::set_active_isa(cpu::best_isa()); }
};

// Runs every ISA on heads [kv_begin, kv_end) and compares with the reference:
// max |got - want| <= tol * max |want|, untouched padding and other heads.
// Returns the largest relative error seen, for the log.
double check_case(const Case& c, uint32_t seed, float tol = 1e-5f, int32_t kv_begin = 0, int32_t kv_end = -1) {
  SCOPED_TRACE(c.describe() + " seed=" + std::to_string(seed));
  if (kv_end < 0) kv_end = c.num_kv_heads;
  std::mt19937 rng(seed);
  Fixture f(c, rng);
  const int32_t n_q = static_cast<int32_t>(c.q_pos.size());
  const int64_t row = static_cast<int64_t>(c.n_heads) * c.head_dim;
  const int64_t q_stride = row + 5;  // padding between tokens
  const int64_t out_stride = row + 3;
  std::vector<float> q(n_q * q_stride, kNaN);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int32_t i = 0; i < n_q; ++i) {
    for (int64_t x = 0; x < row; ++x) q[i * q_stride + x] = u(rng) * c.q_gain;
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  std::vector<float> sinks(c.n_heads);
  std::normal_distribution<float> sink_logit(0.0f, 2.0f);
  for (float& s : sinks) s = sink_logit(rng);
  const AttentionOptions options{c.window, c.sinks ? sinks.data() : nullptr, c.tree_begin,
                                 c.tree_mask.empty() ? nullptr : c.tree_mask.data()};
  if (c.free_before_window && c.window > 0) {
    int32_t first = c.kv_len;
    for (int32_t p : c.q_pos) first = std::min(first, std::max(0, p - c.window + 1));
    // An id far past any storage: a read of it faults (-1, what the manager
    // leaves, would land just before the buffer, where only ASan sees it).
    for (int32_t b = 0; b < first / c.block_size; ++b) f.table[static_cast<size_t>(b)] = BlockId{1 << 30};
  }
  std::vector<float> want(n_q * out_stride, kSentinel);
  ref::paged_attention(f.view, f.table.data(), c.kv_len, q.data(), q_stride, c.q_pos.data(), n_q, c.n_heads, scale,
                       want.data(), out_stride, kv_begin, kv_end, options);
  float max_want = 0;
  for (float w : want) {
    if (w != kSentinel) max_want = std::max(max_want, std::fabs(w));
  }
  const int32_t group = c.n_heads / c.num_kv_heads;
  std::vector<float> scratch(paged_attention_scratch_floats(n_q, c.n_heads, c.head_dim, c.block_size) + 1, kNaN);
  const float canary = 777.0f;
  double worst_rel = 0;
  for (cpu::Isa isa : cpu::supported_isas()) {
    SCOPED_TRACE(cpu::isa_name(isa).data());
    cpu::set_active_isa(isa);
    scratch.back() = canary;
    std::vector<float> got(n_q * out_stride, kSentinel);
    paged_attention(f.view, f.table.data(), c.kv_len, q.data(), q_stride, c.q_pos.data(), n_q, c.n_heads, scale,
                    got.data(), out_stride, kv_begin, kv_end, scratch.data(), options);
    if (scratch.back() != canary) {
      ADD_FAILURE() << "kernel wrote past its scratch";
      return INFINITY;
    }
    double worst = -1;
    int64_t worst_at = 0;
    for (int32_t i = 0; i < n_q; ++i) {
      for (int64_t x = 0; x < out_stride; ++x) {
        const int64_t at = i * out_stride + x;
        const int32_t h = x < row ? static_cast<int32_t>(x / c.head_dim) : -1;
        const bool selected = h >= kv_begin * group && h < kv_end * group;
        if (!selected) {
          if (got[at] != kSentinel) {
            ADD_FAILURE() << "wrote outside selected heads at query " << i << " offset " << x;
            return INFINITY;
          }
          continue;
        }
        double err = std::isnan(got[at]) ? INFINITY : std::fabs(static_cast<double>(got[at]) - want[at]);
        if (err > worst) {
          worst = err;
          worst_at = at;
        }
      }
    }
    const int64_t wi = worst_at / out_stride, wx = worst_at % out_stride;
    EXPECT_LE(worst, tol * max_want) << "worst element: query " << wi << " (pos " << c.q_pos[wi] << ") head "
                                     << wx / c.head_dim << " d " << wx % c.head_dim << ": got " << got[worst_at]
                                     << " want " << want[worst_at] << " (max |want| " << max_want << ")";
    if (max_want > 0) worst_rel = std::max(worst_rel, worst / max_want);
  }
  return worst_rel;
}

std::vector<int32_t> range(int32_t begin, int32_t end) {
  std::vector<int32_t> r(end - begin);
  std::iota(r.begin(), r.end(), begin);
  return r;
}

struct HeadConfig {
  int32_t n_heads, num_kv_heads;
};
constexpr HeadConfig kHeads[] = {{1, 1}, {4, 4}, {8, 2}, {6, 1}};
constexpr int32_t kHeadDims[] = {8, 12, 64, 80, 128};
constexpr int32_t kBlockSizes[] = {1, 3, 16};

TEST_F(PagedAttention, DecodeMatchesReference) {
  uint32_t seed = 1000;
  double worst = 0;
  for (int32_t hd : kHeadDims)
    for (HeadConfig hc : kHeads)
      for (int32_t bs : kBlockSizes)
        for (int32_t kv_len : {1, 17, 100, 333}) {
          worst = std::max(worst, check_case({hd, hc.n_heads, hc.num_kv_heads, bs, kv_len, {kv_len - 1}}, seed++));
        }
  std::printf("worst relative error %.3g (tolerance 1e-5)\n", worst);
}

TEST_F(PagedAttention, FullPrefillMatchesReference) {
  uint32_t seed = 2000;
  double worst = 0;
  for (int32_t hd : kHeadDims)
    for (HeadConfig hc : kHeads)
      for (int32_t bs : kBlockSizes)
        for (int32_t kv_len : {1, 17, 100, 333}) {
          // Keep the test fast: the longest prefill at one odd head dim for
          // every head layout, and at 128 for the common GQA layout.
          if (kv_len == 333 && hd != 12 && !(hd == 128 && hc.n_heads == 8 && bs == 16)) continue;
          worst = std::max(worst, check_case({hd, hc.n_heads, hc.num_kv_heads, bs, kv_len, range(0, kv_len)}, seed++));
        }
  std::printf("worst relative error %.3g (tolerance 1e-5)\n", worst);
}

TEST_F(PagedAttention, ChunkedPrefillMatchesReference) {
  uint32_t seed = 3000;
  for (int32_t hd : kHeadDims)
    for (HeadConfig hc : kHeads)
      for (int32_t bs : kBlockSizes) check_case({hd, hc.n_heads, hc.num_kv_heads, bs, 64, range(40, 64)}, seed++);
}

TEST_F(PagedAttention, UnorderedPositionsAndRepeats) {
  // Verification of draft tokens and mixed batches need not arrive sorted.
  std::mt19937 rng(4000);
  for (int32_t t = 0; t < 20; ++t) {
    const int32_t kv_len = 1 + static_cast<int32_t>(rng() % 90);
    std::vector<int32_t> pos(1 + rng() % 40);
    for (int32_t& p : pos) p = static_cast<int32_t>(rng() % kv_len);
    HeadConfig hc = kHeads[t % 4];
    check_case({kHeadDims[t % 5], hc.n_heads, hc.num_kv_heads, kBlockSizes[t % 3], kv_len, pos}, 4100 + t);
  }
}

// f16 (half the memory and reads) and quantized caches (Q8_0, Q4_0 rows
// dequantized in registers): decode, prefill and chunked prefill on every
// ISA, against the reference reading the same rows.
void check_cache_dtype(DType dtype, uint32_t seed) {
  double worst = 0;
  for (int32_t hd : kHeadDims)
    for (HeadConfig hc : kHeads)
      for (int32_t bs : kBlockSizes) {
        Case dec{hd, hc.n_heads, hc.num_kv_heads, bs, 100, {99}};
        Case pre{hd, hc.n_heads, hc.num_kv_heads, bs, 70, range(0, 70)};
        Case chunk{hd, hc.n_heads, hc.num_kv_heads, bs, 64, range(40, 64)};
        for (Case* c : {&dec, &pre, &chunk}) {
          c->dtype = dtype;
          worst = std::max(worst, check_case(*c, seed++));
        }
      }
  std::printf("%s: worst relative error %.3g (tolerance 1e-5)\n", dtype_name(dtype).data(), worst);
}
TEST_F(PagedAttention, F16CacheMatchesReference) { check_cache_dtype(DType::kF16, 8000); }
TEST_F(PagedAttention, Q8CacheMatchesReference) { check_cache_dtype(DType::kQ8_0, 8200); }
TEST_F(PagedAttention, Q4CacheMatchesReference) { check_cache_dtype(DType::kQ4_0, 8400); }

TEST_F(PagedAttention, LargeScoresStayFinite) {
  double worst = 0;
  // Scores in the hundreds overflow exp() without the running max. A score
  // carries float rounding of about |score| * 1e-7 * sqrt(head_dim), which the
  // peaky softmax passes to the output, hence the looser tolerance.
  uint32_t seed = 5000;
  for (int32_t hd : {12, 64, 128})
    for (int32_t bs : {3, 16}) {
      worst = std::max(worst, check_case({hd, 8, 2, bs, 150, range(0, 150), 40.0f}, seed++, 5e-5f));
      worst = std::max(worst, check_case({hd, 6, 1, bs, 333, {332}, 40.0f}, seed++, 5e-5f));
    }
  std::printf("worst relative error %.3g (tolerance 5e-5)\n", worst);
}

TEST_F(PagedAttention, HeadRangesComposeAndLeaveOthersUntouched) {
  uint32_t seed = 6000;
  for (int32_t bs : {1, 16}) {
    Case c{64, 8, 4, bs, 50, range(20, 50)};
    check_case(c, seed++, 1e-5f, 0, 1);
    check_case(c, seed++, 1e-5f, 1, 3);
    check_case(c, seed++, 1e-5f, 3, 4);
    check_case(c, seed++, 1e-5f, 2, 2);  // empty range writes nothing
  }
}

// Random shapes: any head dim (tails of every width), GQA groups, block
// sizes, context lengths and query sets, on every ISA.
// A random shape: head dim 1..max_hd, 1-3 kv heads, GQA groups 1..max_group,
// blocks of 1-20, a context of 1..max_kv, a prefill chunk ending at the
// context or up to 12 scattered positions, K/V in any cache dtype.
Case random_case(std::mt19937& rng, int32_t max_hd, int32_t max_group, int32_t max_kv) {
  const int32_t hd = 1 + static_cast<int32_t>(rng() % max_hd);
  const int32_t kv_heads = 1 + static_cast<int32_t>(rng() % 3);
  const int32_t group = 1 + static_cast<int32_t>(rng() % max_group);
  const int32_t bs = 1 + static_cast<int32_t>(rng() % 20);
  const int32_t kv_len = 1 + static_cast<int32_t>(rng() % max_kv);
  std::vector<int32_t> pos;
  if (rng() % 2) {
    pos = range(static_cast<int32_t>(rng() % kv_len), kv_len);  // a prefill chunk ending at kv_len
  } else {
    pos.resize(1 + rng() % 12);
    for (int32_t& p : pos) p = static_cast<int32_t>(rng() % kv_len);
  }
  Case c{hd, group * kv_heads, kv_heads, bs, kv_len, pos};
  constexpr DType kDtypes[] = {DType::kF32, DType::kF16, DType::kQ8_0, DType::kQ4_0};
  c.dtype = kDtypes[rng() % 4];
  return c;
}

TEST_F(PagedAttention, RandomShapesMatchReference) {
  const uint32_t seed = 9000;
  std::printf("[ seed ] %u\n", seed);
  std::mt19937 rng(seed);
  for (int t = 0; t < 40; ++t) check_case(random_case(rng, 160, 9, 200), seed + 1 + t);
}

TEST_F(PagedAttention, SlidingWindowMatchesReference) {
  const uint32_t seed = 9500;
  std::printf("[ seed ] %u\n", seed);
  std::mt19937 rng(seed);
  for (int t = 0; t < 40; ++t) {
    Case c = random_case(rng, 130, 6, 300);                       // contexts past several key tiles
    c.window = 1 + static_cast<int32_t>(rng() % (c.kv_len + 8));  // 1 (only itself) .. wider than the context
    c.free_before_window = t % 2 == 1;                            // never read: the kernel must not touch them
    check_case(c, seed + 1 + t);
  }
}

TEST_F(PagedAttention, SinksMatchReference) {
  // Learned sink logits (gpt-oss), with and without a sliding window, on
  // both the per-key and the transposed-tile paths.
  const uint32_t seed = 9700;
  std::printf("[ seed ] %u\n", seed);
  std::mt19937 rng(seed);
  for (int t = 0; t < 40; ++t) {
    Case c = random_case(rng, 130, 6, 300);
    c.sinks = true;
    if (t % 2) c.window = 1 + static_cast<int32_t>(rng() % (c.kv_len + 8));
    check_case(c, seed + 1 + t);
  }
}

// A random tree of `size` nodes (parent before child, -1: the root token
// before tree_begin); masks[i] = the bits of node i's ancestors and itself.
std::vector<uint64_t> random_tree_masks(std::mt19937& rng, int32_t size, std::vector<int32_t>* parents) {
  std::vector<uint64_t> masks(size);
  parents->assign(size, -1);
  for (int32_t i = 0; i < size; ++i) {
    (*parents)[i] = static_cast<int32_t>(rng() % (i + 1)) - 1;  // -1 .. i - 1
    masks[i] = (uint64_t{1} << i) | ((*parents)[i] >= 0 ? masks[(*parents)[i]] : 0);
  }
  return masks;
}

TEST_F(PagedAttention, TreeMaskMatchesReference) {
  // Speculative drafts as a tree after a random context: the queries are the
  // last context tokens (causal) and every node (its ancestors only), on
  // every dtype and both score paths; trees up to the 64-node limit.
  const uint32_t seed = 9800;
  std::printf("[ seed ] %u\n", seed);
  std::mt19937 rng(seed);
  for (int t = 0; t < 40; ++t) {
    Case c = random_case(rng, 100, 2, 100);
    const int32_t size = t < 4 ? 64 : 1 + static_cast<int32_t>(rng() % 40);
    c.tree_begin = 1 + static_cast<int32_t>(rng() % 90);
    c.kv_len = c.tree_begin + size;
    std::vector<int32_t> parents;
    const std::vector<uint64_t> nodes = random_tree_masks(rng, size, &parents);
    c.q_pos.clear();
    c.tree_mask.clear();
    const int32_t n_context = 1 + static_cast<int32_t>(rng() % std::min(3, c.tree_begin));
    for (int32_t p = c.tree_begin - n_context; p < c.tree_begin; ++p) {
      c.q_pos.push_back(p);
      c.tree_mask.push_back(0);  // before tree_begin: causal, the mask unread
    }
    for (int32_t i = 0; i < size; ++i) {
      c.q_pos.push_back(c.tree_begin + i);
      c.tree_mask.push_back(nodes[i]);
    }
    check_case(c, seed + 1 + t);
  }
}

TEST_F(PagedAttention, TreeNodeSeesExactlyItsBranch) {
  // Independent of the reference: a node's output under the tree mask equals
  // causal attention over a cache holding its context then its branch
  // (root-to-node path) at consecutive positions.
  std::mt19937 rng(9900);
  const int32_t hd = 64, n_heads = 4, kv_heads = 2, bs = 5, context = 37, size = 20;
  Case tree{hd, n_heads, kv_heads, bs, context + size, {}};
  std::vector<int32_t> parents;
  tree.tree_begin = context;
  const std::vector<uint64_t> masks = random_tree_masks(rng, size, &parents);
  Fixture f(tree, rng);
  const int64_t row = int64_t{n_heads} * hd;
  std::vector<float> q(row);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& x : q) x = u(rng);
  const float scale = 0.125f;
  std::vector<float> scratch(paged_attention_scratch_floats(1, n_heads, hd, bs));
  for (cpu::Isa isa : cpu::supported_isas()) {
    cpu::set_active_isa(isa);
    for (int32_t node = 0; node < size; ++node) {
      SCOPED_TRACE(std::string(cpu::isa_name(isa)) + " node " + std::to_string(node));
      std::vector<float> got(row), want(row);
      const int32_t pos = context + node;
      paged_attention(f.view, f.table.data(), tree.kv_len, q.data(), row, &pos, 1, n_heads, scale, got.data(), row, 0,
                      kv_heads, scratch.data(), {.tree_begin = context, .tree_mask = &masks[node]});
      // The branch as a chain: a second cache with the path's rows moved down.
      std::vector<int32_t> path;
      for (int32_t a = node; a >= 0; a = parents[a]) path.insert(path.begin(), a);
      Case chain{hd, n_heads, kv_heads, bs, context + static_cast<int32_t>(path.size()), {}};
      std::vector<float> ck = f.k, cv = f.v;
      auto at = [&](int32_t j, int32_t h) {
        return f.table[j / bs].value * f.stride + (static_cast<size_t>(h) * bs + j % bs) * hd;
      };
      for (size_t d = 0; d < path.size(); ++d)
        for (int32_t h = 0; h < kv_heads; ++h) {
          std::copy_n(&f.k[at(context + path[d], h)], hd, &ck[at(context + static_cast<int32_t>(d), h)]);
          std::copy_n(&f.v[at(context + path[d], h)], hd, &cv[at(context + static_cast<int32_t>(d), h)]);
        }
      const PagedKVView chain_view{ck.data(), cv.data(), bs, kv_heads, hd};
      const int32_t last = chain.kv_len - 1;
      paged_attention(chain_view, f.table.data(), chain.kv_len, q.data(), row, &last, 1, n_heads, scale, want.data(),
                      row, 0, kv_heads, scratch.data());
      for (int64_t x = 0; x < row; ++x) ASSERT_NEAR(got[x], want[x], 1e-5f) << "element " << x;
    }
  }
}

TEST_F(PagedAttention, AQueryGetsTheSameBitsInAnyTile) {
  // A query's output must not depend on its tile-mates: a prefill tile (64
  // rows: queries in lanes), a smaller one (the transposed key tile) and the
  // query alone (a decode group) give the same bits, or batching, chunking
  // and speculative verification would change greedy outputs. Groups of 8
  // (f16: the transposed tile from 4 rows on every ISA) and 16 (f32: from
  // 16 rows on AVX2), causal, windowed, with sinks.
  struct Shape {
    int32_t n_heads, kv_heads;
    DType dtype;
  };
  std::mt19937 rng(9950);
  for (const Shape& sh : {Shape{16, 2, DType::kF16}, Shape{32, 2, DType::kF32}})
    for (int32_t hd : {64, 40})
      for (int variant = 0; variant < 3; ++variant) {
        Case c{hd, sh.n_heads, sh.kv_heads, 16, 150, range(150 - 13, 150)};
        c.dtype = sh.dtype;
        c.window = variant == 1 ? 70 : 0;
        c.sinks = variant == 2;
        SCOPED_TRACE(c.describe());
        Fixture f(c, rng);
        const int32_t n_q = static_cast<int32_t>(c.q_pos.size());
        const int64_t row = static_cast<int64_t>(c.n_heads) * c.head_dim;
        std::vector<float> q(n_q * row);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        for (float& x : q) x = u(rng);
        std::vector<float> sinks(c.n_heads);
        for (float& x : sinks) x = u(rng);
        const AttentionOptions options{c.window, c.sinks ? sinks.data() : nullptr, 0, nullptr};
        const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
        for (cpu::Isa isa : cpu::supported_isas()) {
          SCOPED_TRACE(cpu::isa_name(isa).data());
          cpu::set_active_isa(isa);
          // All queries at once, then each of the first queries alone.
          std::vector<float> all(n_q * row), one(row);
          std::vector<float> scratch(paged_attention_scratch_floats(n_q, c.n_heads, hd, c.block_size));
          paged_attention(f.view, f.table.data(), c.kv_len, q.data(), row, c.q_pos.data(), n_q, c.n_heads, scale,
                          all.data(), row, 0, c.num_kv_heads, scratch.data(), options);
          for (int32_t i = 0; i < n_q; i += 3) {
            paged_attention(f.view, f.table.data(), c.kv_len, q.data() + i * row, row, &c.q_pos[i], 1, c.n_heads, scale,
                            one.data(), row, 0, c.num_kv_heads, scratch.data(), options);
            EXPECT_EQ(0, std::memcmp(one.data(), all.data() + i * row, row * sizeof(float))) << "query " << i;
          }
        }
      }
}

TEST_F(PagedAttention, SinkScalesTheOutputDown) {
  // One key and a sink logit s: softmax weight 1 / (1 + exp(s - score)) on the value.
  Case c{16, 2, 1, 4, 1, {0}};
  std::mt19937 rng(9800);
  Fixture f(c, rng);
  std::vector<float> q(2 * 16, 0.0f), got(q.size());  // score 0 for every key
  const float sinks[2] = {0.0f, std::log(3.0f)};      // weights 1/2 and 1/4
  std::vector<float> scratch(paged_attention_scratch_floats(1, 2, 16, 4));
  paged_attention(f.view, f.table.data(), 1, q.data(), 0, c.q_pos.data(), 1, 2, 0.25f, got.data(), 0, 0, 1,
                  scratch.data(), {.sinks = sinks});
  const size_t off = f.table[0].value * f.stride;
  for (int32_t d = 0; d < 16; ++d) {
    EXPECT_NEAR(got[d], 0.5f * f.v[off + d], 1e-6f);
    EXPECT_NEAR(got[16 + d], 0.25f * f.v[off + d], 1e-6f);
  }
}

TEST_F(PagedAttention, WindowOfOneIsTheValueItself) {
  // A window of one: each query sees only its own key, so the output is that value.
  Case c{16, 4, 2, 4, 70, range(0, 70)};
  c.window = 1;
  std::mt19937 rng(9600);
  Fixture f(c, rng);
  std::vector<float> q(70 * 4 * 16, 0.3f), got(q.size());
  std::vector<float> scratch(paged_attention_scratch_floats(70, 4, 16, 4));
  paged_attention(f.view, f.table.data(), 70, q.data(), 64, c.q_pos.data(), 70, 4, 0.25f, got.data(), 64, 0, 2,
                  scratch.data(), {.window = 1});
  for (int32_t p = 0; p < 70; ++p)
    for (int32_t h = 0; h < 4; ++h) {
      const size_t off = f.table[p / 4].value * f.stride + (static_cast<size_t>(h / 2) * 4 + p % 4) * 16;
      for (int32_t d = 0; d < 16; ++d) ASSERT_FLOAT_EQ(got[(p * 4 + h) * 16 + d], f.v[off + d]);
    }
}

TEST_F(PagedAttention, DetectsAWrongAnswer) {
  // Guard against a vacuous comparison: a cache changed after the reference
  // run must fail the same check.
  Case c{16, 2, 1, 4, 9, {8}};
  std::mt19937 rng(7000);
  Fixture f(c, rng);
  std::vector<float> q(c.n_heads * c.head_dim, 0.5f), want(q.size()), got(q.size());
  ref::paged_attention(f.view, f.table.data(), c.kv_len, q.data(), 0, c.q_pos.data(), 1, c.n_heads, 0.25f, want.data(),
                       0, 0, 1);
  f.v[f.table[0].value * f.stride] += 1.0f;  // value of key 0, dim 0
  std::vector<float> scratch(paged_attention_scratch_floats(1, c.n_heads, c.head_dim, c.block_size));
  paged_attention(f.view, f.table.data(), c.kv_len, q.data(), 0, c.q_pos.data(), 1, c.n_heads, 0.25f, got.data(), 0, 0,
                  1, scratch.data());
  EXPECT_GT(std::fabs(got[0] - want[0]), 1e-3f);
}

}  // namespace
}  // namespace pagoda::kernels
