// Paged attention written once over the vector vocabulary V (16 lanes, see
// cpu/simd_scalar.h); cpu/attention_<isa>.cc binds V and textually includes
// this file inside its anonymous namespace, then registers
// paged_attention_kernel<kMinRowsF32, kMinRowsF16> in its kernel table.
//
// FlashAttention-style: for one KV head, up to kAttnRowTarget query rows
// (query x head of the GQA group) sweep the keys they can see in tiles of
// kAttnKeyTile, keeping an online softmax per row (running max m, running
// sum l, accumulator acc), so each K/V tile is read once per group. Scores
// come either from one dot product per key (horizontal sums), or, for tiles
// with at least kMinRowsTransposed rows, from a transposed copy of the key
// tile (keys in lanes: no horizontal sums, two vectors per row; f16 and
// quantized keys converted once per tile rather than once per row), the
// threshold chosen per ISA and K/V element type by benchmark.

using VF = V::F;
constexpr int kW = V::kLanes;
static_assert(kAttnKeyTile == 2 * kW, "a key tile is two vectors of scores");

// K/V row formats (kernels::kv_row_bytes): a row is one token's head_dim
// elements of one kv head. load(row, d): elements d .. d + 15 (d % 16 == 0);
// load_part(row, d, n): the first n of them (1 <= n <= 16), zeros after.
struct RowF32 {
  static VF load(const uint8_t* r, int32_t d) { return V::load_f(reinterpret_cast<const float*>(r) + d); }
  static VF load_part(const uint8_t* r, int32_t d, int32_t n) {
    return V::load_f_part(reinterpret_cast<const float*>(r) + d, n);
  }
};
struct RowF16 {
  static VF load(const uint8_t* r, int32_t d) { return V::load_f16(r + 2 * static_cast<size_t>(d)); }
  static VF load_part(const uint8_t* r, int32_t d, int32_t n) {
    return V::load_f16_part(reinterpret_cast<const uint16_t*>(r) + d, n);
  }
};
inline float block_scale(const uint8_t* b) {
  uint16_t h;
  std::memcpy(&h, b, sizeof h);
  return V::half_to_f(h);
}
// Q8_0 blocks (f16 scale, 32 int8). The row's last block is zero-padded, so
// a part is a whole load.
struct RowQ8 {
  static VF load(const uint8_t* r, int32_t d) {
    const uint8_t* b = r + (d / 32) * 34;
    return V::mul(V::load_i8_f(reinterpret_cast<const int8_t*>(b + 2 + d % 32)), V::set1_f(block_scale(b)));
  }
  static VF load_part(const uint8_t* r, int32_t d, int32_t) { return load(r, d); }
};
// Q4_0 blocks (f16 scale, 16 bytes: elements 0-15 in the low nibbles,
// 16-31 in the high ones), value (q - 8) * scale.
struct RowQ4 {
  static VF load(const uint8_t* r, int32_t d) {
    const uint8_t* b = r + (d / 32) * 18;
    const float s = block_scale(b);
    return V::fmadd(V::load_u4_f(b + 2, d % 32 != 0), V::set1_f(s), V::set1_f(-8.0f * s));
  }
  static VF load_part(const uint8_t* r, int32_t d, int32_t) { return load(r, d); }
};

inline float exp1(float x) {
  float e[kW];
  V::store_f(e, V::exp(V::set1_f(x)));
  return e[0];
}

// s[k] = q . keys[k] for kKeys keys at once: independent FMA chains, q
// loaded once.
template <int kKeys, class R>
void dot_block(const float* q, const uint8_t* const* keys, int32_t hd, float* s) {
  VF a[kKeys];
  for (int k = 0; k < kKeys; ++k) a[k] = V::zero_f();
  int32_t d = 0;
  for (; d + kW <= hd; d += kW) {
    const VF x = V::load_f(q + d);
    for (int k = 0; k < kKeys; ++k) a[k] = V::fmadd(x, R::load(keys[k], d), a[k]);
  }
  if (d < hd) {
    const VF x = V::load_f_part(q + d, hd - d);
    for (int k = 0; k < kKeys; ++k) a[k] = V::fmadd(x, R::load_part(keys[k], d, hd - d), a[k]);
  }
  for (int k = 0; k < kKeys; ++k) s[k] = V::hsum(a[k]);
}

// s[j] = q . keys[j] for j < n.
template <class R>
void dot_keys(const float* q, const uint8_t* const* keys, int32_t n, int32_t hd, float* s) {
  constexpr int kB = V::kAccF;
  int32_t j = 0;
  for (; j + kB <= n; j += kB) dot_block<kB, R>(q, keys + j, hd, s + j);
  if constexpr (kB > 4) {
    if (j + 4 <= n) {
      dot_block<4, R>(q, keys + j, hd, s + j);
      j += 4;
    }
  }
  for (; j < n; ++j) dot_block<1, R>(q, keys + j, hd, s + j);
}

// acc[d0 .. d0 + kChunks * kW) (the last chunk holding `last` lanes) kept in
// registers across all n values, so the FMAs are independent.
template <int kChunks, class R>
void weighted_block(float* acc, VF vc, const float* p, const uint8_t* const* vals, int32_t n, int32_t d0,
                    int32_t last) {
  constexpr int kFull = kChunks - 1;
  const bool partial = last < kW;
  VF a[kChunks];
  for (int c = 0; c < kFull; ++c) a[c] = V::mul(V::load_f(acc + d0 + c * kW), vc);
  a[kFull] = V::mul(partial ? V::load_f_part(acc + d0 + kFull * kW, last) : V::load_f(acc + d0 + kFull * kW), vc);
  for (int32_t j = 0; j < n; ++j) {
    const VF pj = V::set1_f(p[j]);
    const uint8_t* v = vals[j];
    for (int c = 0; c < kFull; ++c) a[c] = V::fmadd(pj, R::load(v, d0 + c * kW), a[c]);
    const int32_t dl = d0 + kFull * kW;
    a[kFull] = V::fmadd(pj, partial ? R::load_part(v, dl, last) : R::load(v, dl), a[kFull]);
  }
  for (int c = 0; c < kFull; ++c) V::store_f(acc + d0 + c * kW, a[c]);
  if (partial) {
    V::store_f_part(acc + d0 + kFull * kW, a[kFull], last);
  } else {
    V::store_f(acc + d0 + kFull * kW, a[kFull]);
  }
}

// acc = c * acc + sum_j p[j] * vals[j] over hd dims.
template <class R>
void weighted_sum(float* acc, float c, const float* p, const uint8_t* const* vals, int32_t n, int32_t hd) {
  constexpr int kMax = V::kAccF;  // chunks held in registers at once
  static_assert(kMax == 4 || kMax == 8, "weighted_sum handles 4 or 8 register chunks");
  const VF vc = V::set1_f(c);
  for (int32_t d0 = 0; d0 < hd; d0 += kMax * kW) {
    const int32_t rem = std::min(hd - d0, kMax * kW);
    const int32_t chunks = (rem + kW - 1) / kW;
    const int32_t last = rem - (chunks - 1) * kW;
    switch (chunks) {
      case 1: weighted_block<1, R>(acc, vc, p, vals, n, d0, last); break;
      case 2: weighted_block<2, R>(acc, vc, p, vals, n, d0, last); break;
      case 3: weighted_block<3, R>(acc, vc, p, vals, n, d0, last); break;
      case 4: weighted_block<4, R>(acc, vc, p, vals, n, d0, last); break;
      default:
        if constexpr (kMax == 8) {
          switch (chunks) {
            case 5: weighted_block<5, R>(acc, vc, p, vals, n, d0, last); break;
            case 6: weighted_block<6, R>(acc, vc, p, vals, n, d0, last); break;
            case 7: weighted_block<7, R>(acc, vc, p, vals, n, d0, last); break;
            default: weighted_block<8, R>(acc, vc, p, vals, n, d0, last); break;
          }
        }
        break;
    }
  }
}

// kt[d][0..32) = keys[0..nk)[d], zero past nk (nk in 1..32): 16 x 16
// in-register transposes, a partial last block of dims loaded with zeros.
template <class R>
void transpose_keys(const uint8_t* const* keys, int32_t nk, int32_t hd, float* kt) {
  for (int32_t jb = 0; jb < kAttnKeyTile; jb += kW) {
    for (int32_t d0 = 0; d0 < hd; d0 += kW) {
      const int32_t nd = std::min<int32_t>(kW, hd - d0);
      VF r[kW];
      for (int32_t i = 0; i < kW; ++i) {
        if (jb + i >= nk) {
          r[i] = V::zero_f();
        } else {
          r[i] = nd == kW ? R::load(keys[jb + i], d0) : R::load_part(keys[jb + i], d0, nd);
        }
      }
      if (jb < nk) V::transpose16(r);
      for (int32_t k = 0; k < nd; ++k) V::store_f(kt + static_cast<size_t>(d0 + k) * kAttnKeyTile + jb, r[k]);
    }
  }
}

// sc[r][0..32) = scale * q_r . kt[:, 0..32) for R query rows: R rows x 2
// vectors of independent FMA chains.
template <int R>
void qk_rows(const float* const* q, const float* kt, int32_t hd, float scale, float* sc) {
  VF acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = V::zero_f();
  for (int32_t d = 0; d < hd; ++d) {
    const VF k0 = V::load_f(kt + d * kAttnKeyTile);
    const VF k1 = V::load_f(kt + d * kAttnKeyTile + kW);
    for (int r = 0; r < R; ++r) {
      const VF qb = V::set1_f(q[r][d]);
      acc[r][0] = V::fmadd(qb, k0, acc[r][0]);
      acc[r][1] = V::fmadd(qb, k1, acc[r][1]);
    }
  }
  const VF vs = V::set1_f(scale);
  for (int r = 0; r < R; ++r) {
    V::store_f(sc + r * kAttnKeyTile, V::mul(acc[r][0], vs));
    V::store_f(sc + r * kAttnKeyTile + kW, V::mul(acc[r][1], vs));
  }
}
void qk_tile(const float* const* q, int32_t rows, const float* kt, int32_t hd, float scale, float* sc) {
  constexpr int kR = V::kAccF / 2;
  int32_t r = 0;
  for (; r + kR <= rows; r += kR) qk_rows<kR>(q + r, kt, hd, scale, sc + r * kAttnKeyTile);
  for (; r < rows; ++r) qk_rows<1>(q + r, kt, hd, scale, sc + r * kAttnKeyTile);
}

// max of s[0..n), n in 1..32.
float row_max(const float* s, int32_t n) {
  VF m = V::load_f_part_or(s, std::min(n, kW), -INFINITY);
  if (n > kW) m = V::max(m, V::load_f_part_or(s + kW, n - kW, -INFINITY));
  return V::hmax(m);
}

// p[j] = exp(s[j] - m) for j < n (n in 1..32); returns their sum.
float exp_sum(const float* s, int32_t n, float m, float* p) {
  const VF vm = V::set1_f(m);
  VF sum = V::zero_f();
  for (int32_t j = 0; j < n; j += kW) {
    const int32_t k = std::min(n - j, kW);
    const VF e = V::exp(V::sub(V::load_f_part_or(s + j, k, -INFINITY), vm));  // exp(-inf) = 0
    V::store_f_part(p + j, e, k);
    sum = V::add(sum, e);
  }
  return V::hsum(sum);
}

// Online-softmax state of `rows` query rows, laid out in scratch.
struct RowState {
  float* acc;  // [rows][head_dim]
  float* m;    // running max of scaled scores
  float* l;    // running sum of exp(score - m)
  float* kt;   // [head_dim][kAttnKeyTile] transposed key tile
  float* sc;   // [rows][kAttnKeyTile] scores of the tile
  float* s;    // [kAttnKeyTile] scores of one row
  float* p;    // [kAttnKeyTile] exp(score - m) of one row
  float* vt;   // [kAttnKeyTile][head_dim] the value tile as floats (not f32 K/V)
};

// vt[j][0..hd) = row vals[j] as floats, then vals[j] = that f32 row, for
// j < n: f16 and quantized values are converted once per tile, not once per
// query row.
template <class R>
void convert_values(const uint8_t** vals, int32_t n, int32_t hd, float* vt) {
  for (int32_t j = 0; j < n; ++j) {
    float* dst = vt + static_cast<size_t>(j) * hd;
    int32_t d = 0;
    for (; d + kW <= hd; d += kW) V::store_f(dst + d, R::load(vals[j], d));
    if (d < hd) V::store_f_part(dst + d, R::load_part(vals[j], d, hd - d), hd - d);
    vals[j] = reinterpret_cast<const uint8_t*>(dst);
  }
}

// The first key query i may see: 0, or the start of its sliding window.
inline int32_t window_start(const AttentionArgs& a, int32_t i) {
  return a.window > 0 ? std::max(0, a.q_pos[i] - a.window + 1) : 0;
}

// Queries [q_begin, q_end) x the group's heads of kv head `kvh` against all
// keys they can see, tile by tile.
template <int kMinRowsTransposed, class R>
void attend_query_tile(const AttentionArgs& a, int32_t kvh, int32_t q_begin, int32_t q_end, const RowState& st) {
  const PagedKVView& kv = a.kv;
  const int32_t hd = kv.head_dim;
  const int32_t bs = kv.block_size;
  const int32_t group = a.n_heads / kv.num_kv_heads;
  const int32_t rows = (q_end - q_begin) * group;
  std::fill(st.acc, st.acc + static_cast<size_t>(rows) * hd, 0.0f);
  if (a.sinks) {
    // The sink starts each row's softmax: running max its logit, sum exp(0).
    for (int32_t r = 0; r < rows; ++r) st.m[r] = a.sinks[kvh * group + r % group];
    std::fill(st.l, st.l + rows, 1.0f);
  } else {
    std::fill(st.m, st.m + rows, -INFINITY);
    std::fill(st.l, st.l + rows, 0.0f);
  }
  int32_t max_pos = -1, min_lo = INT32_MAX;
  for (int32_t i = q_begin; i < q_end; ++i) {
    max_pos = std::max(max_pos, a.q_pos[i]);
    min_lo = std::min(min_lo, window_start(a, i));
  }

  const uint8_t* keys[kAttnKeyTile];
  const uint8_t* vals[kAttnKeyTile];
  const auto* kbase = static_cast<const uint8_t*>(kv.k);
  const auto* vbase = static_cast<const uint8_t*>(kv.v);
  const size_t row_bytes = kv.row_bytes();
  const size_t block_bytes = kv.block_bytes();
  const size_t head_offset = static_cast<size_t>(kvh) * bs * row_bytes;
  const bool transposed = rows >= kMinRowsTransposed;
  constexpr bool kF32 = std::is_same_v<R, RowF32>;
  const float* qrows[kAttnRowTarget];
  if (transposed)
    for (int32_t r = 0; r < rows; ++r)
      qrows[r] = a.q + (q_begin + r / group) * a.q_stride + static_cast<int64_t>(kvh * group + r % group) * hd;
  // Tiles wholly before every query's window are never read.
  for (int32_t t0 = min_lo / kAttnKeyTile * kAttnKeyTile; t0 <= max_pos; t0 += kAttnKeyTile) {
    const int32_t t1 = std::min(t0 + kAttnKeyTile, max_pos + 1);
    for (int32_t j = t0; j < t1; ++j) {
      const size_t off = static_cast<size_t>(a.block_table[j / bs].value) * block_bytes + head_offset +
                         static_cast<size_t>(j % bs) * row_bytes;
      keys[j - t0] = kbase + off;
      vals[j - t0] = vbase + off;
    }
    if (transposed) {
      transpose_keys<R>(keys, t1 - t0, hd, st.kt);
      qk_tile(qrows, rows, st.kt, hd, a.scale, st.sc);
    }
    if constexpr (!kF32) convert_values<R>(vals, t1 - t0, hd, st.vt);
    for (int32_t i = q_begin; i < q_end; ++i) {
      // Causal mask, and the sliding window's start: keys [lo, hi) of this tile.
      const int32_t lo = std::max(t0, window_start(a, i));
      const int32_t n = std::min(t1, a.q_pos[i] + 1) - lo;
      if (n <= 0) continue;
      const int32_t s0 = lo - t0;
      for (int32_t g = 0; g < group; ++g) {
        const int32_t r = (i - q_begin) * group + g;
        const float* sr = st.sc + static_cast<size_t>(r) * kAttnKeyTile + s0;  // scores, scaled
        if (!transposed) {
          const float* qr = a.q + i * a.q_stride + static_cast<int64_t>(kvh * group + g) * hd;
          dot_keys<R>(qr, keys + s0, n, hd, st.s);
          for (int32_t j = 0; j < n; ++j) st.s[j] *= a.scale;
          sr = st.s;
        }
        const float m_new = std::max(st.m[r], row_max(sr, n));
        const float c = exp1(st.m[r] - m_new);  // 0 on the first tile
        st.l[r] = st.l[r] * c + exp_sum(sr, n, m_new, st.p);
        st.m[r] = m_new;
        weighted_sum<RowF32>(st.acc + static_cast<size_t>(r) * hd, c, st.p, vals + s0, n, hd);
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

template <int kMinRowsTransposed, class R>
void attend(const AttentionArgs& a) {
  const PagedKVView& kv = a.kv;
  const int32_t group = a.n_heads / kv.num_kv_heads;
  const int32_t q_tile = std::max(1, kAttnRowTarget / group);
  const int32_t rows_cap = attention_max_rows(a.n_q, a.n_heads);
  RowState st;
  st.acc = a.scratch;
  st.m = st.acc + static_cast<size_t>(rows_cap) * kv.head_dim;
  st.l = st.m + rows_cap;
  st.kt = st.l + rows_cap;
  st.sc = st.kt + static_cast<size_t>(kv.head_dim) * kAttnKeyTile;
  st.s = st.sc + static_cast<size_t>(rows_cap) * kAttnKeyTile;
  st.p = st.s + kAttnKeyTile;
  st.vt = st.p + kAttnKeyTile;
  for (int32_t kvh = a.kv_head_begin; kvh < a.kv_head_end; ++kvh)
    for (int32_t q0 = 0; q0 < a.n_q; q0 += q_tile)
      attend_query_tile<kMinRowsTransposed, R>(a, kvh, q0, std::min(a.n_q, q0 + q_tile), st);
}

// The kernel table's AttentionFn (arguments checked by
// kernels::paged_attention): tiles of at least kMinRowsF32 (f32 K/V) or
// kMinRowsF16 (f16 and quantized K/V, converted once per tile when
// transposed) query rows score from the transposed key tile.
template <int kMinRowsF32, int kMinRowsF16>
void paged_attention_kernel(const AttentionArgs& a) {
  switch (a.kv.dtype) {
    case DType::kF16: attend<kMinRowsF16, RowF16>(a); break;
    case DType::kQ8_0: attend<kMinRowsF16, RowQ8>(a); break;
    case DType::kQ4_0: attend<kMinRowsF16, RowQ4>(a); break;
    default: attend<kMinRowsF32, RowF32>(a); break;
  }
}
