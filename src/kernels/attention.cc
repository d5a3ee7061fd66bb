#include "kernels/attention.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "kernels/attention_ops.h"
#include "kernels/fast_exp.h"

namespace pagoda::kernels {
namespace {

using namespace attention_internal;

// Keys per tile: the tile's K and V rows (2 x 32 x head_dim floats) stay in
// L1 while every query row of the group uses them.
constexpr int32_t kKeyTile = 32;
// Query rows (query x head of the group) processed against each tile: with
// 64 rows the transposed key tile (below) is built once per 64 rows.
constexpr int32_t kRowTarget = 64;
// Tiles with at least this many rows compute scores from a transposed copy
// of the key tile (keys in lanes, no horizontal sums) when Ops supports it:
// from 4 rows (a GQA decode group of 8 included) the transposes pay off
// (bench/kernels/attention_bench.cc: -13..25% decode time at group 8).
constexpr int32_t kMinRowsTransposed = 4;
static_assert(kKeyTile == 32, "Avx512Ops::qk_tile computes 32 keys per row");

int32_t max_rows(int32_t n_q, int32_t n_heads) {
  return static_cast<int32_t>(std::min<int64_t>(static_cast<int64_t>(n_q) * n_heads, std::max(kRowTarget, n_heads)));
}

struct Args {
  const PagedKVView* kv;
  const int32_t* block_table;
  const float* q;
  int64_t q_stride;
  const int32_t* q_pos;
  int32_t n_heads;
  float scale;
  float* out;
  int64_t out_stride;
};

// Online-softmax state of `rows` query rows, laid out in scratch.
struct RowState {
  float* acc;  // [rows][head_dim]
  float* m;    // running max of scaled scores
  float* l;    // running sum of exp(score - m)
  float* kt;   // [head_dim][kKeyTile] transposed key tile
  float* sc;   // [rows][kKeyTile] scores of the tile
};

// Queries [q_begin, q_end) x the group's heads of kv head `kvh` against all
// keys they can see, tile by tile.
template <class Ops, class E>
void attend_query_tile(const Args& a, int32_t kvh, int32_t q_begin, int32_t q_end, RowState st, float* s) {
  const PagedKVView& kv = *a.kv;
  const int32_t hd = kv.head_dim;
  const int32_t bs = kv.block_size;
  const int32_t group = a.n_heads / kv.num_kv_heads;
  const int32_t rows = (q_end - q_begin) * group;
  std::fill(st.acc, st.acc + static_cast<size_t>(rows) * hd, 0.0f);
  std::fill(st.m, st.m + rows, -INFINITY);
  std::fill(st.l, st.l + rows, 0.0f);
  int32_t max_pos = -1;
  for (int32_t i = q_begin; i < q_end; ++i) max_pos = std::max(max_pos, a.q_pos[i]);

  const E* keys[kKeyTile];
  const E* vals[kKeyTile];
  const E* kbase = static_cast<const E*>(kv.k);
  const E* vbase = static_cast<const E*>(kv.v);
  float* p = s + kKeyTile;
  const size_t head_offset = static_cast<size_t>(kvh) * bs * hd;
  const bool transposed = Ops::kHasQkTile && rows >= kMinRowsTransposed;
  const float* qrows[kRowTarget];
  if (transposed)
    for (int32_t r = 0; r < rows; ++r)
      qrows[r] = a.q + (q_begin + r / group) * a.q_stride + static_cast<int64_t>(kvh * group + r % group) * hd;
  for (int32_t t0 = 0; t0 <= max_pos; t0 += kKeyTile) {
    const int32_t t1 = std::min(t0 + kKeyTile, max_pos + 1);
    for (int32_t j = t0; j < t1; ++j) {
      size_t off = static_cast<size_t>(a.block_table[j / bs]) * kv.block_stride + head_offset +
                   static_cast<size_t>(j % bs) * hd;
      keys[j - t0] = kbase + off;
      vals[j - t0] = vbase + off;
    }
    if (transposed) {
      Ops::transpose_keys(keys, t1 - t0, hd, st.kt);
      Ops::qk_tile(qrows, rows, st.kt, hd, a.scale, st.sc);
    }
    for (int32_t i = q_begin; i < q_end; ++i) {
      const int32_t n = std::min(t1, a.q_pos[i] + 1) - t0;  // causal mask
      if (n <= 0) continue;
      for (int32_t g = 0; g < group; ++g) {
        const int32_t r = (i - q_begin) * group + g;
        float m_new, c, sum;
        if (transposed) {  // scores already scaled
          const float* sr = st.sc + static_cast<size_t>(r) * kKeyTile;
          m_new = std::max(st.m[r], Ops::row_max(sr, n));
          c = fast_exp(st.m[r] - m_new);  // 0 on the first tile
          sum = Ops::exp_sum(sr, n, m_new, p);
        } else {
          const float* qr = a.q + i * a.q_stride + static_cast<int64_t>(kvh * group + g) * hd;
          Ops::dot_keys(qr, keys, n, hd, s);
          float tile_max = -INFINITY;
          for (int32_t j = 0; j < n; ++j) {
            s[j] *= a.scale;
            tile_max = std::max(tile_max, s[j]);
          }
          m_new = std::max(st.m[r], tile_max);
          c = fast_exp(st.m[r] - m_new);
          for (int32_t j = 0; j < n; ++j) p[j] = fast_exp(s[j] - m_new);
          sum = 0;
          for (int32_t j = 0; j < n; ++j) sum += p[j];
        }
        st.l[r] = st.l[r] * c + sum;
        st.m[r] = m_new;
        Ops::weighted_sum(st.acc + static_cast<size_t>(r) * hd, c, p, vals, n, hd);
      }
    }
  }
  for (int32_t i = q_begin; i < q_end; ++i) {
    for (int32_t g = 0; g < group; ++g) {
      const int32_t r = (i - q_begin) * group + g;
      const float inv = 1.0f / st.l[r];
      const float* acc = st.acc + static_cast<size_t>(r) * hd;
      float* o = a.out + i * a.out_stride + static_cast<int64_t>(kvh * group + g) * hd;
      for (int32_t d = 0; d < hd; ++d) o[d] = acc[d] * inv;
    }
  }
}

template <class Ops, class E>
void run(const Args& a, int32_t kv_len, int32_t n_q, int32_t kv_head_begin, int32_t kv_head_end, float* scratch) {
  const PagedKVView& kv = *a.kv;
  PAGODA_CHECK(kv.num_kv_heads > 0 && a.n_heads % kv.num_kv_heads == 0);
  PAGODA_CHECK(0 <= kv_head_begin && kv_head_begin <= kv_head_end && kv_head_end <= kv.num_kv_heads);
  PAGODA_CHECK(kv.head_dim > 0 && kv.block_size > 0);
  const int32_t group = a.n_heads / kv.num_kv_heads;
  const int32_t q_tile = std::max(1, kRowTarget / group);
  const int32_t rows_cap = max_rows(n_q, a.n_heads);
  RowState st;
  st.acc = scratch;
  st.m = st.acc + static_cast<size_t>(rows_cap) * kv.head_dim;
  st.l = st.m + rows_cap;
  st.kt = st.l + rows_cap;
  st.sc = st.kt + static_cast<size_t>(kv.head_dim) * kKeyTile;
  float* s = st.sc + static_cast<size_t>(rows_cap) * kKeyTile;
  for (int32_t i = 0; i < n_q; ++i) PAGODA_CHECK(a.q_pos[i] >= 0 && a.q_pos[i] < kv_len);
  for (int32_t kvh = kv_head_begin; kvh < kv_head_end; ++kvh) {
    for (int32_t q0 = 0; q0 < n_q; q0 += q_tile) {
      attend_query_tile<Ops, E>(a, kvh, q0, std::min(n_q, q0 + q_tile), st, s);
    }
  }
}

}  // namespace

size_t paged_attention_scratch_floats(int32_t n_q, int32_t n_heads, int32_t head_dim, int32_t block_size) {
  const size_t rows = static_cast<size_t>(max_rows(n_q, n_heads));
  return rows * (static_cast<size_t>(head_dim) + 2 + kKeyTile) + static_cast<size_t>(head_dim) * kKeyTile +
         2 * kKeyTile;
}

bool paged_attention_has_isa(AttentionIsa isa) {
  switch (isa) {
    case AttentionIsa::kScalar:
      return true;
    case AttentionIsa::kAvx2:
#if defined(__AVX2__) && defined(__FMA__)
      return true;
#else
      return false;
#endif
    case AttentionIsa::kAvx512:
#if defined(__AVX512F__)
      return true;
#else
      return false;
#endif
  }
  return false;
}

const char* attention_isa_name(AttentionIsa isa) {
  switch (isa) {
    case AttentionIsa::kScalar:
      return "scalar";
    case AttentionIsa::kAvx2:
      return "avx2";
    case AttentionIsa::kAvx512:
      return "avx512";
  }
  return "?";
}

AttentionIsa paged_attention_best_isa() {
  if (paged_attention_has_isa(AttentionIsa::kAvx512)) return AttentionIsa::kAvx512;
  if (paged_attention_has_isa(AttentionIsa::kAvx2)) return AttentionIsa::kAvx2;
  return AttentionIsa::kScalar;
}

void paged_attention_with_isa(AttentionIsa isa, const PagedKVView& kv, const int32_t* block_table, int32_t kv_len,
                              const float* q, int64_t q_stride, const int32_t* q_pos, int32_t n_q, int32_t n_heads,
                              float scale, float* out, int64_t out_stride, int32_t kv_head_begin,
                              int32_t kv_head_end, float* scratch) {
  PAGODA_CHECK(paged_attention_has_isa(isa));
  const Args a{&kv, block_table, q, q_stride, q_pos, n_heads, scale, out, out_stride};
  switch (isa) {
#if defined(__AVX512F__)
    case AttentionIsa::kAvx512:
      return kv.f16 ? run<Avx512Ops, uint16_t>(a, kv_len, n_q, kv_head_begin, kv_head_end, scratch)
                    : run<Avx512Ops, float>(a, kv_len, n_q, kv_head_begin, kv_head_end, scratch);
#endif
#if defined(__AVX2__) && defined(__FMA__)
    case AttentionIsa::kAvx2:
      return kv.f16 ? run<Avx2Ops, uint16_t>(a, kv_len, n_q, kv_head_begin, kv_head_end, scratch)
                    : run<Avx2Ops, float>(a, kv_len, n_q, kv_head_begin, kv_head_end, scratch);
#endif
    default:
      return kv.f16 ? run<ScalarOps, uint16_t>(a, kv_len, n_q, kv_head_begin, kv_head_end, scratch)
                    : run<ScalarOps, float>(a, kv_len, n_q, kv_head_begin, kv_head_end, scratch);
  }
}

void paged_attention(const PagedKVView& kv, const int32_t* block_table, int32_t kv_len, const float* q,
                     int64_t q_stride, const int32_t* q_pos, int32_t n_q, int32_t n_heads, float scale, float* out,
                     int64_t out_stride, int32_t kv_head_begin, int32_t kv_head_end, float* scratch) {
  paged_attention_with_isa(paged_attention_best_isa(), kv, block_table, kv_len, q, q_stride, q_pos, n_q, n_heads,
                           scale, out, out_stride, kv_head_begin, kv_head_end, scratch);
}

}  // namespace pagoda::kernels
