// Paged attention written once over the vector vocabulary V (16 lanes, see
// cpu/simd_scalar.h); cpu/attention_<isa>.cc binds V and textually includes
// this file inside its anonymous namespace, then registers
// paged_attention_kernel<kMinRowsF32, kMinRowsF16> in its kernel table.
//
// FlashAttention-style: for one KV head, up to kAttnRowTarget query rows
// (query x head of the GQA group) sweep the keys they can see in tiles of
// kAttnKeyTile, keeping an online softmax per row (running max m, running
// sum l as 16 partial sums, accumulator acc), so each K/V tile is read once
// per group. Scores come either from one dot product per key (horizontal
// sums), or, for tiles with at least kMinRowsTransposed rows, from a
// transposed copy of the key tile (keys in lanes: no horizontal sums, two
// vectors per row; f16 keys converted once per tile rather than once per
// row), the threshold chosen per ISA and K/V element type by benchmark.
// Quantized keys always score with integer dots from a transposed tile
// (qk_tile_int). P·V runs after each tile's softmax over blocks of rows
// (pv_tile), values loaded once per block. Prefill-sized tiles of float
// keys (kMinRowsLanes rows) put the query rows in lanes instead
// (attend_lanes): scores, softmax and P·V without a transpose or a
// horizontal reduction per tile, every row's bits the same as on the
// transposed tile.

using VF = V::F;
constexpr int kW = V::kLanes;
static_assert(kAttnKeyTile == 2 * kW, "a key tile is two vectors of scores");

// K/V row formats (kernels::kv_row_bytes): a row is one token's head_dim
// elements of one kv head. load(row, d): elements d .. d + 15 (d % 16 == 0);
// load_part(row, d, n): the first n of them (1 <= n <= 16), zeros after.
struct RowF32 {
  static constexpr bool kIntKeys = false;  // scores by float dots
  static VF load(const uint8_t* r, int32_t d) { return V::load_f(reinterpret_cast<const float*>(r) + d); }
  static VF load_part(const uint8_t* r, int32_t d, int32_t n) {
    return V::load_f_part(reinterpret_cast<const float*>(r) + d, n);
  }
};
struct RowF16 {
  static constexpr bool kIntKeys = false;
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
// a part is a whole load. Keys of the quantized formats score with integer
// dots (kIntKeys, qk_tile_int): stage_u8(row, b, dst) writes block b's 32
// values as u8 = value + 128, scale(row, b) its scale.
struct RowQ8 {
  static constexpr bool kIntKeys = true;
  static void stage_u8(const uint8_t* r, int32_t b, uint8_t* dst) {
    // Eight bytes at a time (a byte loop became stack round trips).
    const uint8_t* q = r + b * 34 + 2;
    for (int32_t i = 0; i < 32; i += 8) {
      uint64_t w;
      std::memcpy(&w, q + i, 8);
      w ^= 0x8080808080808080ULL;
      std::memcpy(dst + i, &w, 8);
    }
  }
  static float scale(const uint8_t* r, int32_t b) { return block_scale(r + b * 34); }
  static VF load(const uint8_t* r, int32_t d) {
    const uint8_t* b = r + (d / 32) * 34;
    return V::mul(V::load_i8_f(reinterpret_cast<const int8_t*>(b + 2 + d % 32)), V::set1_f(block_scale(b)));
  }
  static VF load_part(const uint8_t* r, int32_t d, int32_t) { return load(r, d); }
};
// Q4_0 blocks (f16 scale, 16 bytes: elements 0-15 in the low nibbles,
// 16-31 in the high ones), value (q - 8) * scale.
struct RowQ4 {
  static constexpr bool kIntKeys = true;
  static void stage_u8(const uint8_t* r, int32_t b, uint8_t* dst) {
    // Eight bytes at a time: (nibble - 8) + 128 = nibble + 120 never carries.
    constexpr uint64_t kLow = 0x0F0F0F0F0F0F0F0FULL, k120 = 0x7878787878787878ULL;
    for (int32_t i = 0; i < 16; i += 8) {
      uint64_t w;
      std::memcpy(&w, r + b * 18 + 2 + i, 8);
      const uint64_t lo = (w & kLow) + k120, hi = ((w >> 4) & kLow) + k120;
      std::memcpy(dst + i, &lo, 8);
      std::memcpy(dst + 16 + i, &hi, 8);
    }
  }
  static float scale(const uint8_t* r, int32_t b) { return block_scale(r + b * 18); }
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

// Where row r's exps of the tile's keys lie: key(j)[r * kRow] is row r's
// exp of key j. The per-row path stores them [rows][key tile] (PtRows), the
// queries-in-lanes path [key tile][stride] (PtKeys).
struct PtRows {
  static constexpr int32_t kRow = kAttnKeyTile;
  const float* p;
  const float* key(int32_t j) const { return p + j; }
  PtRows from_row(int32_t r) const { return {p + r * kRow}; }
};
struct PtKeys {
  static constexpr int32_t kRow = 1;
  const float* p;
  int32_t stride;
  const float* key(int32_t j) const { return p + static_cast<size_t>(j) * stride; }
  PtKeys from_row(int32_t r) const { return {p + r, stride}; }
};

// The tile's P·V for the kR rows at acc over dims [d0, d0 + kC * kW) (the
// last chunk holding `last` lanes): acc[r] = c[r] * acc[r] + sum_j
// pt[r][j] * vals[j] for keys j in [j0, j1). The kR x kC accumulators stay
// in registers and each value chunk is loaded (converted from f16 or
// dequantized) once for all kR rows.
template <class R, int kR, int kC, bool kPartial, class P>
void pv_block(float* acc, const float* c, P pt, const uint8_t* const* vals, int32_t j0, int32_t j1, int32_t hd,
              int32_t d0, int32_t last) {
  constexpr int kFull = kC - 1;
  // last < kW as a template parameter: a runtime flag made GCC spill the
  // accumulators to the stack on every key.
  constexpr bool partial = kPartial;
  const int32_t dl = d0 + kFull * kW;
  VF a[kR][kC];
  for (int r = 0; r < kR; ++r) {
    const VF vc = V::set1_f(c[r]);
    const float* ar = acc + static_cast<size_t>(r) * hd;
    for (int ch = 0; ch < kFull; ++ch) a[r][ch] = V::mul(V::load_f(ar + d0 + ch * kW), vc);
    a[r][kFull] = V::mul(partial ? V::load_f_part(ar + dl, last) : V::load_f(ar + dl), vc);
  }
  for (int32_t j = j0; j < j1; ++j) {
    const uint8_t* v = vals[j];
    VF x[kC];
    for (int ch = 0; ch < kFull; ++ch) x[ch] = R::load(v, d0 + ch * kW);
    x[kFull] = partial ? R::load_part(v, dl, last) : R::load(v, dl);
    const float* pk = pt.key(j);
    for (int r = 0; r < kR; ++r) {
      const VF pj = V::set1_f(pk[r * P::kRow]);
      for (int ch = 0; ch < kC; ++ch) a[r][ch] = V::fmadd(pj, x[ch], a[r][ch]);
    }
  }
  for (int r = 0; r < kR; ++r) {
    float* ar = acc + static_cast<size_t>(r) * hd;
    for (int ch = 0; ch < kFull; ++ch) V::store_f(ar + d0 + ch * kW, a[r][ch]);
    if (partial) {
      V::store_f_part(ar + dl, a[r][kFull], last);
    } else {
      V::store_f(ar + dl, a[r][kFull]);
    }
  }
}

// pv_block over `chunks` register chunks (1 .. kAccF / 2) of dims from d0.
template <class R, int kR, bool kPartial, class P>
void pv_chunks(int32_t chunks, float* acc, const float* c, P pt, const uint8_t* const* vals, int32_t j0, int32_t j1,
               int32_t hd, int32_t d0, int32_t last) {
  switch (chunks) {
    case 1: pv_block<R, kR, 1, kPartial>(acc, c, pt, vals, j0, j1, hd, d0, last); break;
    case 2: pv_block<R, kR, 2, kPartial>(acc, c, pt, vals, j0, j1, hd, d0, last); break;
    default:
      if constexpr (V::kAccF / 2 == 4) {
        if (chunks == 3) {
          pv_block<R, kR, 3, kPartial>(acc, c, pt, vals, j0, j1, hd, d0, last);
        } else {
          pv_block<R, kR, 4, kPartial>(acc, c, pt, vals, j0, j1, hd, d0, last);
        }
      }
      break;
  }
}

// pv_block over every dim of kR rows, up to kMaxC chunks at a time.
template <class R, int kR, class P>
void pv_rows(float* acc, const float* c, P pt, const uint8_t* const* vals, int32_t j0, int32_t j1, int32_t hd) {
  constexpr int kMaxC = V::kAccF / 2;
  static_assert(kMaxC == 2 || kMaxC == 4, "pv_rows handles 2 or 4 register chunks");
  for (int32_t d0 = 0; d0 < hd; d0 += kMaxC * kW) {
    const int32_t rem = std::min(hd - d0, kMaxC * kW);
    const int32_t chunks = (rem + kW - 1) / kW;
    const int32_t last = rem - (chunks - 1) * kW;
    if (last == kW) {
      pv_chunks<R, kR, false>(chunks, acc, c, pt, vals, j0, j1, hd, d0, last);
    } else {
      pv_chunks<R, kR, true>(chunks, acc, c, pt, vals, j0, j1, hd, d0, last);
    }
  }
}

// The tile's P·V for all rows: blocks of kAccF / 2 rows, then single rows.
template <class R, class P>
void pv_tile(float* acc, const float* c, P pt, const uint8_t* const* vals, int32_t j0, int32_t j1, int32_t rows,
             int32_t hd) {
  constexpr int kR = V::kAccF / 2;
  int32_t r = 0;
  for (; r + kR <= rows; r += kR)
    pv_rows<R, kR>(acc + static_cast<size_t>(r) * hd, c + r, pt.from_row(r), vals, j0, j1, hd);
  for (; r < rows; ++r) pv_rows<R, 1>(acc + static_cast<size_t>(r) * hd, c + r, pt.from_row(r), vals, j0, j1, hd);
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
// Blocks of kAccF rows (2 x kAccF accumulators: a 64-row prefill tile's
// scores took ~13% less time than with kAccF / 2, bench/RESULTS.md
// 2026-12-05/06), then one of kAccF / 2, then single rows.
void qk_tile(const float* const* q, int32_t rows, const float* kt, int32_t hd, float scale, float* sc) {
  constexpr int kR = V::kAccF;
  int32_t r = 0;
  for (; r + kR <= rows; r += kR) qk_rows<kR>(q + r, kt, hd, scale, sc + r * kAttnKeyTile);
  if (r + kR / 2 <= rows) {
    qk_rows<kR / 2>(q + r, kt, hd, scale, sc + r * kAttnKeyTile);
    r += kR / 2;
  }
  for (; r < rows; ++r) qk_rows<1>(q + r, kt, hd, scale, sc + r * kAttnKeyTile);
}

// Integer scores for quantized keys. A query row is quantized to Q8_0 like a
// key row (kernels::store_kv_row: the reference rounds the same way), so
// q . k = sum over blocks b of dq[b] * dk[b] * sum_i q8[i] * k8[i], exact in
// int32. The tile's keys are staged as u8 = k8 + 128 and transposed into
// dwords of 4 dims with keys in lanes, kt8[c][j] = key j's dims 4c .. 4c+3,
// so dot_q8 with a row's dword c broadcast adds 4 products to each key's
// lane; V::kQ8Offset * sum(q8 of the block) removes the +128 where dot_q8
// does not (AVX2 restores the sign itself: offset 0).
struct IntQueries {
  const int32_t* q;   // [rows][nd] the quantized rows, 4 int8 a dword
  const float* dq;    // [rows][nb] their block scales
  const float* corr;  // [rows][nb] kQ8Offset * sum of the block's int8
};

// qrows[r] (hd floats) -> IntQueries arrays of nb blocks each; tmp holds one
// Q8_0 row (nb * 34 bytes).
void quantize_queries(const float* const* qrows, int32_t rows, int32_t hd, int32_t nb, uint8_t* tmp, int32_t* q,
                      float* dq, float* corr) {
  for (int32_t r = 0; r < rows; ++r) {
    store_kv_row(DType::kQ8_0, qrows[r], hd, tmp);
    auto* qb = reinterpret_cast<int8_t*>(q + static_cast<size_t>(r) * nb * 8);
    for (int32_t b = 0; b < nb; ++b) {
      const uint8_t* blk = tmp + b * 34;
      dq[r * nb + b] = block_scale(blk);
      std::memcpy(qb + b * 32, blk + 2, 32);
      int32_t sum = 0;
      for (int32_t i = 0; i < 32; ++i) sum += qb[b * 32 + i];
      corr[r * nb + b] = static_cast<float>(V::kQ8Offset * sum);
    }
  }
}

// Stages the tile's nk keys (u8 = value + 128, nb blocks each, keys past nk
// zero) and their scales ks[b][32] (0 past nk), then transposes them into
// kt8 [nb * 8][32] dwords with 16 x 16 transposes. stg holds 32 * nb * 32
// bytes plus 64 of slack.
template <class R>
void stage_int_keys(const uint8_t* const* keys, int32_t nk, int32_t nb, uint8_t* stg, float* ks, float* kt8) {
  const int32_t hp = nb * 32;  // bytes of a staged key
  for (int32_t j = 0; j < kAttnKeyTile; ++j) {
    uint8_t* dst = stg + static_cast<size_t>(j) * hp;
    if (j < nk) {
      for (int32_t b = 0; b < nb; ++b) {
        R::stage_u8(keys[j], b, dst + b * 32);
        ks[b * kAttnKeyTile + j] = R::scale(keys[j], b);
      }
    } else {
      std::memset(dst, 0x80, hp);  // value 0
      for (int32_t b = 0; b < nb; ++b) ks[b * kAttnKeyTile + j] = 0.0f;
    }
  }
  const int32_t nd = nb * 8;  // dwords of a key (a multiple of 8)
  for (int32_t jb = 0; jb < kAttnKeyTile; jb += kW)
    for (int32_t c0 = 0; c0 < nd; c0 += kW) {
      // Bit patterns moved as floats; a last chunk of 8 dwords reads 8 more
      // (the next key's, or the slack) that land in dwords never stored.
      VF r[kW];
      for (int32_t i = 0; i < kW; ++i)
        r[i] = V::load_f(reinterpret_cast<const float*>(stg + static_cast<size_t>(jb + i) * hp + 4 * c0));
      V::transpose16(r);
      for (int32_t k = 0; k < std::min<int32_t>(kW, nd - c0); ++k)
        V::store_f(kt8 + static_cast<size_t>(c0 + k) * kAttnKeyTile + jb, r[k]);
    }
}

// sc[r][0..32) = scale * q_r . keys for kR rows from r0: per block, kR rows x
// 2 vectors of int32 accumulators, then scaled into float sums.
template <int kR>
void qk_rows_int(const IntQueries& iq, int32_t r0, const float* kt8, const float* ks, int32_t nb, float scale,
                 float* sc) {
  const int32_t nd = nb * 8;
  VF s[kR][2];
  for (int r = 0; r < kR; ++r) s[r][0] = s[r][1] = V::zero_f();
  for (int32_t b = 0; b < nb; ++b) {
    V::I acc[kR][2];
    for (int r = 0; r < kR; ++r) acc[r][0] = acc[r][1] = V::zero_i();
    for (int32_t c = 8 * b; c < 8 * b + 8; ++c) {
      const auto k0 = V::prep_q8(V::load_i(kt8 + static_cast<size_t>(c) * kAttnKeyTile));
      const auto k1 = V::prep_q8(V::load_i(kt8 + static_cast<size_t>(c) * kAttnKeyTile + kW));
      for (int r = 0; r < kR; ++r) {
        const V::I x = V::set1_i32(iq.q[static_cast<size_t>(r0 + r) * nd + c]);
        acc[r][0] = V::dot_q8_prep(acc[r][0], k0, x);
        acc[r][1] = V::dot_q8_prep(acc[r][1], k1, x);
      }
    }
    const VF ks0 = V::load_f(ks + b * kAttnKeyTile), ks1 = V::load_f(ks + b * kAttnKeyTile + kW);
    for (int r = 0; r < kR; ++r) {
      const VF corr = V::set1_f(iq.corr[(r0 + r) * nb + b]);
      const VF d = V::set1_f(iq.dq[(r0 + r) * nb + b] * scale);
      s[r][0] = V::fmadd(V::add(V::cvt_i_f(acc[r][0]), corr), V::mul(ks0, d), s[r][0]);
      s[r][1] = V::fmadd(V::add(V::cvt_i_f(acc[r][1]), corr), V::mul(ks1, d), s[r][1]);
    }
  }
  for (int r = 0; r < kR; ++r) {
    V::store_f(sc + (r0 + r) * kAttnKeyTile, s[r][0]);
    V::store_f(sc + (r0 + r) * kAttnKeyTile + kW, s[r][1]);
  }
}
void qk_tile_int(const IntQueries& iq, int32_t rows, const float* kt8, const float* ks, int32_t nb, float scale,
                 float* sc) {
  constexpr int kR = V::kAccF / 2;
  int32_t r = 0;
  for (; r + kR <= rows; r += kR) qk_rows_int<kR>(iq, r, kt8, ks, nb, scale, sc);
  for (; r < rows; ++r) qk_rows_int<1>(iq, r, kt8, ks, nb, scale, sc);
}

// max of s[0..n), n in 1..32.
float row_max(const float* s, int32_t n) {
  VF m = V::load_f_part_or(s, std::min(n, kW), -INFINITY);
  if (n > kW) m = V::max(m, V::load_f_part_or(s + kW, n - kW, -INFINITY));
  return V::hmax(m);
}

// p[j] = exp(s[j] - m) for j < n (n in 1..32).
void exp_store(const float* s, int32_t n, float m, float* p) {
  const VF vm = V::set1_f(m);
  for (int32_t j = 0; j < n; j += kW) {
    const int32_t k = std::min(n - j, kW);
    V::store_f_part(p + j, V::exp(V::sub(V::load_f_part_or(s + j, k, -INFINITY), vm)), k);  // exp(-inf) = 0
  }
}

// A row's softmax sum is kept as 16 partial sums, partial k holding the
// exps of keys k and k + 16 of every tile: lp[k] = lp[k] * c + (p[k] +
// p[k + 16]) after each tile, then sum16 at the end. Both score paths add in
// this order (the per-row one a vector of a row's 16 partials, the
// queries-in-lanes one a vector of 16 rows' partial k), so a row's sum has
// the same bits on either.
inline float sum16(const float* lp, int32_t stride) {
  float s[8];
  for (int32_t i = 0; i < 8; ++i) s[i] = lp[i * stride] + lp[(i + 8) * stride];
  return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

// Online-softmax state of `rows` query rows, laid out in scratch.
// rp: rows rounded up to whole vectors (the queries-in-lanes path).
struct RowState {
  float* acc;  // [rows][head_dim]
  float* m;    // [rp] running max of scaled scores
  float* lp;   // [rp * 16] running partial sums of exp(score - m) (sum16)
  float* kt;   // [head_dim][kAttnKeyTile] transposed key tile
  float* sc;   // [rows][kAttnKeyTile] scores of the tile ([kAttnKeyTile][rp] in lanes)
  float* s;    // [kAttnKeyTile] scores of one row
  float* qt;   // [head_dim][rp] transposed query rows (in lanes)
  float* kf;   // [kAttnKeyTile][head_dim] the key tile as f32 rows (in lanes, f16 keys)
  float* vf;   // [kAttnKeyTile][head_dim] the value tile as f32 rows (in lanes, f16 values)
  // Integer scores (quantized keys), nb = ceil(head_dim / 32) blocks:
  int32_t* iq;   // [rows][nb * 8] quantized query rows
  float* iq_d;   // [rows][nb] their scales
  float* iq_c;   // [rows][nb] their offsets
  uint8_t* tmp;  // one Q8_0 row
  uint8_t* stg;  // [kAttnKeyTile][nb * 32] staged keys, + 64 bytes
  float* ks;     // [nb][kAttnKeyTile] key scales
  float* kt8;    // [nb * 8][kAttnKeyTile] transposed key dwords
  float* pt;     // [rows][kAttnKeyTile] the tile's exp(score - m)
  float* c;      // [rp] the tile's rescale of each row's accumulator
};

// The first key query i may see: 0, or the start of its sliding window.
inline int32_t window_start(const AttentionArgs& a, int32_t i) {
  return a.window > 0 ? std::max(0, a.q_pos[i] - a.window + 1) : 0;
}

// keys/vals[j - t0] = the K and V rows of kv head kvh at positions j in
// [t0, t1). Keys before every query's window (min_lo) are masked; their
// blocks may be gone (KV groups free them): such a key reads the first seen
// row.
inline void tile_rows(const AttentionArgs& a, int32_t kvh, int32_t t0, int32_t t1, int32_t min_lo, const uint8_t** keys,
                      const uint8_t** vals) {
  const PagedKVView& kv = a.kv;
  const int32_t bs = kv.block_size;
  const size_t row_bytes = kv.row_bytes();
  const size_t block_bytes = kv.block_bytes();
  const size_t head_offset = static_cast<size_t>(kvh) * bs * row_bytes;
  const auto* kbase = static_cast<const uint8_t*>(kv.k);
  const auto* vbase = static_cast<const uint8_t*>(kv.v);
  for (int32_t j = t0; j < t1; ++j) {
    const int32_t jr = std::max(j, min_lo);
    const size_t off = static_cast<size_t>(a.block_table[jr / bs].value) * block_bytes + head_offset +
                       static_cast<size_t>(jr % bs) * row_bytes;
    keys[j - t0] = kbase + off;
    vals[j - t0] = vbase + off;
  }
}

// Queries [q_begin, q_end) x the group's heads of kv head `kvh` against all
// keys they can see, tile by tile.
template <int kMinRowsTransposed, class R>
void attend_query_tile(const AttentionArgs& a, int32_t kvh, int32_t q_begin, int32_t q_end, const RowState& st) {
  const PagedKVView& kv = a.kv;
  const int32_t hd = kv.head_dim;
  const int32_t group = a.n_heads / kv.num_kv_heads;
  const int32_t rows = (q_end - q_begin) * group;
  std::fill(st.acc, st.acc + static_cast<size_t>(rows) * hd, 0.0f);
  std::fill(st.lp, st.lp + static_cast<size_t>(rows) * kW, 0.0f);
  if (a.sinks) {
    // The sink starts each row's softmax: running max its logit, sum exp(0).
    for (int32_t r = 0; r < rows; ++r) st.m[r] = a.sinks[kvh * group + r % group];
    for (int32_t r = 0; r < rows; ++r) st.lp[r * kW] = 1.0f;
  } else {
    std::fill(st.m, st.m + rows, -INFINITY);
  }
  int32_t max_pos = -1, min_lo = INT32_MAX;
  for (int32_t i = q_begin; i < q_end; ++i) {
    max_pos = std::max(max_pos, a.q_pos[i]);
    min_lo = std::min(min_lo, window_start(a, i));
  }

  const uint8_t* keys[kAttnKeyTile];
  const uint8_t* vals[kAttnKeyTile];
  // Quantized keys always score from their transposed integer tile.
  const bool transposed = R::kIntKeys || rows >= kMinRowsTransposed;
  const int32_t nb = (hd + 31) / 32;
  const float* qrows[kAttnRowTarget];
  if (transposed)
    for (int32_t r = 0; r < rows; ++r)
      qrows[r] = a.q + (q_begin + r / group) * a.q_stride + static_cast<int64_t>(kvh * group + r % group) * hd;
  if constexpr (R::kIntKeys) quantize_queries(qrows, rows, hd, nb, st.tmp, st.iq, st.iq_d, st.iq_c);
  const IntQueries iq{st.iq, st.iq_d, st.iq_c};
  // Tiles wholly before every query's window are never read.
  for (int32_t t0 = min_lo / kAttnKeyTile * kAttnKeyTile; t0 <= max_pos; t0 += kAttnKeyTile) {
    const int32_t t1 = std::min(t0 + kAttnKeyTile, max_pos + 1);
    tile_rows(a, kvh, t0, t1, min_lo, keys, vals);
    if constexpr (R::kIntKeys) {
      stage_int_keys<R>(keys, t1 - t0, nb, st.stg, st.ks, st.kt8);
      qk_tile_int(iq, rows, st.kt8, st.ks, nb, a.scale, st.sc);
    } else if (transposed) {
      transpose_keys<R>(keys, t1 - t0, hd, st.kt);
      qk_tile(qrows, rows, st.kt, hd, a.scale, st.sc);
    }
    // The tile's softmax, row by row: pt[r] = exp(score - m) on the row's
    // keys (0 elsewhere), c[r] the rescale of what came before.
    int32_t j0 = kAttnKeyTile, j1 = 0;  // keys any row uses
    for (int32_t i = q_begin; i < q_end; ++i) {
      // Causal mask, and the sliding window's start: keys [lo, hi) of this tile.
      const int32_t lo = std::max(t0, window_start(a, i));
      const int32_t n = std::min(t1, a.q_pos[i] + 1) - lo;
      const int32_t s0 = lo - t0;
      // Tree attention: the keys past tree_begin this query does not descend from.
      uint64_t hidden = 0;  // bit j: key lo + j is masked (j < n)
      if (a.tree_mask && a.q_pos[i] >= a.tree_begin && lo + n > a.tree_begin) {
        for (int32_t j = std::max(0, a.tree_begin - lo); j < n; ++j)
          if (!((a.tree_mask[i] >> (lo + j - a.tree_begin)) & 1)) hidden |= uint64_t{1} << j;
      }
      for (int32_t g = 0; g < group; ++g) {
        const int32_t r = (i - q_begin) * group + g;
        float* pr = st.pt + static_cast<size_t>(r) * kAttnKeyTile;
        V::store_f(pr, V::zero_f());
        V::store_f(pr + kW, V::zero_f());
        st.c[r] = 1.0f;
        if (n <= 0) continue;
        float* sr = st.sc + static_cast<size_t>(r) * kAttnKeyTile + s0;  // scores, scaled
        if (!transposed) {
          const float* qr = a.q + i * a.q_stride + static_cast<int64_t>(kvh * group + g) * hd;
          dot_keys<R>(qr, keys + s0, n, hd, st.s);
          for (int32_t j = 0; j < n; ++j) st.s[j] *= a.scale;
          sr = st.s;
        }
        // A tree query's first tile holds its context (tree_begin > 0), so
        // the row's max stays finite.
        for (uint64_t h = hidden; h != 0; h &= h - 1) sr[__builtin_ctzll(h)] = -INFINITY;
        const float m_new = std::max(st.m[r], row_max(sr, n));
        // 0 on the first tile; exactly 1, without an exp, while the max holds.
        const float c = m_new > st.m[r] ? exp1(st.m[r] - m_new) : 1.0f;
        exp_store(sr, n, m_new, pr + s0);
        float* lp = st.lp + static_cast<size_t>(r) * kW;
        V::store_f(lp, V::fmadd(V::load_f(lp), V::set1_f(c), V::add(V::load_f(pr), V::load_f(pr + kW))));
        st.m[r] = m_new;
        st.c[r] = c;
        j0 = std::min(j0, s0);
        j1 = std::max(j1, s0 + n);
      }
    }
    if (j0 < j1) pv_tile<R>(st.acc, st.c, PtRows{st.pt}, vals, j0, j1, rows, hd);
  }
  for (int32_t i = q_begin; i < q_end; ++i) {
    for (int32_t g = 0; g < group; ++g) {
      const int32_t r = (i - q_begin) * group + g;
      const float inv = 1.0f / sum16(st.lp + static_cast<size_t>(r) * kW, 1);
      const float* acc = st.acc + static_cast<size_t>(r) * hd;
      float* o = a.out + i * a.out_stride + static_cast<int64_t>(kvh * group + g) * hd;
      for (int32_t d = 0; d < hd; ++d) o[d] = acc[d] * inv;
    }
  }
}

// ---- Queries in lanes ----
// Tiles of at least kMinRowsLanes rows with float keys transpose their
// query rows once (qt[d][rp], zero rows past `rows`) and score keys in
// lanes' place: st[j][rp] = scale * q . k_j, each key element broadcast
// against 16 rows. The keys need no transpose, and the softmax (max, exp,
// partial sums) runs down the lanes without horizontal reductions. A row
// gets the same bits as on the per-row paths (the same FMA chain over d,
// the same exps, rescales and partial sums, the same P·V): a query's output
// does not depend on how many rows share its tile.

// From 48 rows (3 vectors): prefill tiles (64 rows) ran 13-17% faster than
// on the transposed key tile (bench/kernels/attention_bench.cc, AVX-512 and
// AVX2), a 16- or 40-row verification about the same (bench/RESULTS.md
// 2026-12-06, 19:40-20:40 UTC).
constexpr int32_t kMinRowsLanes = 3 * kW;

// st[k][rv * kW ..] = scale * qt-rows . keys[k] for kK keys x kRV vectors of
// rows: kK x kRV accumulators, kRV query vectors loaded per dim.
template <int kK, int kRV>
void qkt_block(const float* const* keys, const float* qt, int32_t rp, int32_t hd, float scale, float* st) {
  VF acc[kK][kRV];
  for (int k = 0; k < kK; ++k)
    for (int v = 0; v < kRV; ++v) acc[k][v] = V::zero_f();
  for (int32_t d = 0; d < hd; ++d) {
    VF q[kRV];
    for (int v = 0; v < kRV; ++v) q[v] = V::load_f(qt + static_cast<size_t>(d) * rp + v * kW);
    for (int k = 0; k < kK; ++k) {
      const VF kb = V::set1_f(keys[k][d]);
      for (int v = 0; v < kRV; ++v) acc[k][v] = V::fmadd(kb, q[v], acc[k][v]);
    }
  }
  const VF vs = V::set1_f(scale);
  for (int k = 0; k < kK; ++k)
    for (int v = 0; v < kRV; ++v) V::store_f(st + static_cast<size_t>(k) * rp + v * kW, V::mul(acc[k][v], vs));
}
template <int kRV>
void qkt_keys(const float* const* keys, int32_t nk, const float* qt, int32_t rp, int32_t hd, float scale, float* st) {
  constexpr int kK = V::kAccF / 2;
  int32_t j = 0;
  for (; j + kK <= nk; j += kK) qkt_block<kK, kRV>(keys + j, qt, rp, hd, scale, st + static_cast<size_t>(j) * rp);
  for (; j < nk; ++j) qkt_block<1, kRV>(keys + j, qt, rp, hd, scale, st + static_cast<size_t>(j) * rp);
}
// The scores of nk keys for all rp rows: vectors of rows kAccF / 2 at a time.
void qkt_tile(const float* const* keys, int32_t nk, const float* qt, int32_t rp, int32_t hd, float scale, float* st) {
  constexpr int kRV = V::kAccF / 2;
  const int32_t nrv = rp / kW;
  int32_t v = 0;
  for (; v + kRV <= nrv; v += kRV) qkt_keys<kRV>(keys, nk, qt + v * kW, rp, hd, scale, st + v * kW);
  if constexpr (kRV > 2) {
    if (v + 2 <= nrv) {
      qkt_keys<2>(keys, nk, qt + v * kW, rp, hd, scale, st + v * kW);
      v += 2;
    }
  }
  for (; v < nrv; ++v) qkt_keys<1>(keys, nk, qt + v * kW, rp, hd, scale, st + v * kW);
}

// The tile's softmax for rp rows in lanes over the scores st[j][rp] of nk
// keys (masked ones -inf): m and c updated as on the per-row path, st
// replaced by the exps (0 for keys past nk), partial sums lp[k][rp] updated.
void softmax_lanes(float* st, int32_t nk, int32_t rp, float* m, float* c, float* lp) {
  for (int32_t v = 0; v < rp; v += kW) {
    VF mx = V::set1_f(-INFINITY);
    for (int32_t j = 0; j < nk; ++j) mx = V::max(mx, V::load_f(st + static_cast<size_t>(j) * rp + v));
    const VF mo = V::load_f(m + v);
    const VF mn = V::max(mo, mx);
    // A row that has seen no key has m = -inf: its exps are exp(-inf) = 0.
    const VF msub = V::max(mn, V::set1_f(-FLT_MAX));
    V::store_f(c + v, V::exp(V::sub(mo, msub)));
    // The rescale is exactly 1 while the max holds, as on the per-row path.
    float mnew[kW];
    V::store_f(mnew, mn);
    for (int32_t i = 0; i < kW; ++i)
      if (!(mnew[i] > m[v + i])) c[v + i] = 1.0f;
    V::store_f(m + v, mn);
    for (int32_t j = 0; j < nk; ++j) {
      float* sj = st + static_cast<size_t>(j) * rp + v;
      V::store_f(sj, V::exp(V::sub(V::load_f(sj), msub)));
    }
    for (int32_t j = nk; j < kAttnKeyTile; ++j) V::store_f(st + static_cast<size_t>(j) * rp + v, V::zero_f());
    const VF cv = V::load_f(c + v);
    for (int32_t k = 0; k < kW; ++k) {
      float* l = lp + static_cast<size_t>(k) * rp + v;
      const VF pk =
          V::add(V::load_f(st + static_cast<size_t>(k) * rp + v), V::load_f(st + static_cast<size_t>(k + kW) * rp + v));
      V::store_f(l, V::fmadd(V::load_f(l), cv, pk));
    }
  }
}

template <class R>
void attend_lanes(const AttentionArgs& a, int32_t kvh, int32_t q_begin, int32_t q_end, const RowState& st) {
  const PagedKVView& kv = a.kv;
  const int32_t hd = kv.head_dim;
  const int32_t group = a.n_heads / kv.num_kv_heads;
  const int32_t rows = (q_end - q_begin) * group;
  const int32_t rp = (rows + kW - 1) / kW * kW;
  std::fill(st.acc, st.acc + static_cast<size_t>(rows) * hd, 0.0f);
  std::fill(st.lp, st.lp + static_cast<size_t>(rp) * kW, 0.0f);
  std::fill(st.m, st.m + rp, -INFINITY);
  if (a.sinks) {
    // The sink starts each row's softmax: running max its logit, sum exp(0).
    for (int32_t r = 0; r < rows; ++r) st.m[r] = a.sinks[kvh * group + r % group];
    std::fill(st.lp, st.lp + rows, 1.0f);
  }
  int32_t max_pos = -1, min_pos = INT32_MAX, min_lo = INT32_MAX, max_lo = 0;
  for (int32_t i = q_begin; i < q_end; ++i) {
    max_pos = std::max(max_pos, a.q_pos[i]);
    min_pos = std::min(min_pos, a.q_pos[i]);
    min_lo = std::min(min_lo, window_start(a, i));
    max_lo = std::max(max_lo, window_start(a, i));
  }
  // qt[d][r] = row r's query (zero rows past `rows`): 16 x 16 transposes.
  for (int32_t r0 = 0; r0 < rp; r0 += kW) {
    const float* q[kW];
    for (int32_t i = 0; i < kW; ++i) {
      const int32_t r = std::min(r0 + i, rows - 1);  // rows past `rows` are zeroed below
      q[i] = a.q + (q_begin + r / group) * a.q_stride + static_cast<int64_t>(kvh * group + r % group) * hd;
    }
    for (int32_t d0 = 0; d0 < hd; d0 += kW) {
      const int32_t nd = std::min(kW, hd - d0);
      VF t[kW];
      for (int32_t i = 0; i < kW; ++i)
        t[i] = r0 + i >= rows ? V::zero_f() : nd == kW ? V::load_f(q[i] + d0) : V::load_f_part(q[i] + d0, nd);
      V::transpose16(t);
      for (int32_t k = 0; k < nd; ++k) V::store_f(st.qt + static_cast<size_t>(d0 + k) * rp + r0, t[k]);
    }
  }
  const uint8_t* keys[kAttnKeyTile];
  const uint8_t* vals[kAttnKeyTile];
  const float* kf[kAttnKeyTile];
  const uint8_t* vf[kAttnKeyTile];
  float* sc = st.sc;
  for (int32_t t0 = min_lo / kAttnKeyTile * kAttnKeyTile; t0 <= max_pos; t0 += kAttnKeyTile) {
    const int32_t t1 = std::min(t0 + kAttnKeyTile, max_pos + 1);
    const int32_t nk = t1 - t0;
    tile_rows(a, kvh, t0, t1, min_lo, keys, vals);
    for (int32_t j = 0; j < nk; ++j) {
      if constexpr (std::is_same_v<R, RowF32>) {
        kf[j] = reinterpret_cast<const float*>(keys[j]);
        vf[j] = vals[j];
      } else {
        // f32 copies of the tile's rows (exact), converted once per tile.
        float* kr = st.kf + static_cast<size_t>(j) * hd;
        float* vr = st.vf + static_cast<size_t>(j) * hd;
        for (int32_t d = 0; d < hd; d += kW) {
          const int32_t n = std::min(kW, hd - d);
          if (n == kW) {
            V::store_f(kr + d, R::load(keys[j], d));
            V::store_f(vr + d, R::load(vals[j], d));
          } else {
            V::store_f_part(kr + d, R::load_part(keys[j], d, n), n);
            V::store_f_part(vr + d, R::load_part(vals[j], d, n), n);
          }
        }
        kf[j] = kr;
        vf[j] = reinterpret_cast<const uint8_t*>(vr);
      }
    }
    qkt_tile(kf, nk, st.qt, rp, hd, a.scale, sc);
    int32_t j0 = 0, j1 = nk;  // keys any row uses
    const bool tree = a.tree_mask && t1 > a.tree_begin;
    if (t0 < max_lo || t1 - 1 > min_pos || tree) {
      // Masks: the causal one, the sliding window's start, the tree's.
      j0 = kAttnKeyTile;
      j1 = 0;
      for (int32_t i = q_begin; i < q_end; ++i) {
        const int32_t lo = std::max(t0, window_start(a, i));
        const int32_t n = std::min(t1, a.q_pos[i] + 1) - lo;
        const int32_t s0 = lo - t0;
        uint32_t seen = 0;  // bit j: key t0 + j is visible
        if (n > 0) {
          seen = static_cast<uint32_t>(((uint64_t{1} << n) - 1) << s0);
          if (a.tree_mask && a.q_pos[i] >= a.tree_begin && lo + n > a.tree_begin) {
            for (int32_t j = std::max(0, a.tree_begin - lo); j < n; ++j)
              if (!((a.tree_mask[i] >> (lo + j - a.tree_begin)) & 1)) seen &= ~(uint32_t{1} << (s0 + j));
          }
          j0 = std::min(j0, s0);
          j1 = std::max(j1, s0 + n);
        }
        for (int32_t j = 0; j < nk; ++j) {
          if ((seen >> j) & 1) continue;
          float* sj = sc + static_cast<size_t>(j) * rp + (i - q_begin) * group;
          for (int32_t g = 0; g < group; ++g) sj[g] = -INFINITY;
        }
      }
    }
    softmax_lanes(sc, nk, rp, st.m, st.c, st.lp);
    if (j0 < j1) pv_tile<RowF32>(st.acc, st.c, PtKeys{sc, rp}, vf, j0, j1, rows, hd);
  }
  for (int32_t r = 0; r < rows; ++r) {
    const int32_t i = q_begin + r / group, g = r % group;
    const float inv = 1.0f / sum16(st.lp + r, rp);
    const float* acc = st.acc + static_cast<size_t>(r) * hd;
    float* o = a.out + i * a.out_stride + static_cast<int64_t>(kvh * group + g) * hd;
    for (int32_t d = 0; d < hd; ++d) o[d] = acc[d] * inv;
  }
}

// Query tiles of at least kMinRowsLanes rows with float keys score with
// queries in lanes (attend_lanes), smaller ones with the transposed key tile
// from kMinRowsTransposed rows, per-key dots below.
template <int kMinRowsTransposed, class R>
void attend(const AttentionArgs& a) {
  const PagedKVView& kv = a.kv;
  const int32_t group = a.n_heads / kv.num_kv_heads;
  const int32_t q_tile = std::max(1, kAttnRowTarget / group);
  const int32_t rows_cap = attention_max_rows(a.n_q, a.n_heads);
  const size_t rp_cap = (rows_cap + kW - 1) / kW * kW;
  const size_t hd = kv.head_dim;
  // The layout paged_attention_scratch_floats sizes, every array on a
  // 64-byte boundary (the scratch itself need not be: a misaligned one split
  // every vector load across two cache lines).
  RowState st;
  auto* f = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(a.scratch) + 63) & ~uintptr_t{63});
  auto take = [&f](size_t n) {
    float* p = f;
    f += (n + 15) / 16 * 16;
    return p;
  };
  const size_t nb = (hd + 31) / 32;
  st.acc = take(static_cast<size_t>(rows_cap) * hd);
  st.m = take(rp_cap);
  st.c = take(rp_cap);
  st.lp = take(rp_cap * kW);
  st.kt = take(hd * kAttnKeyTile);
  st.sc = take(rp_cap * kAttnKeyTile);
  st.s = take(kAttnKeyTile);
  st.pt = take(static_cast<size_t>(rows_cap) * kAttnKeyTile);
  st.qt = take(hd * rp_cap);
  st.kf = take(kAttnKeyTile * hd);
  st.vf = take(kAttnKeyTile * hd);
  st.iq = reinterpret_cast<int32_t*>(take(static_cast<size_t>(rows_cap) * nb * 8));
  st.iq_d = take(static_cast<size_t>(rows_cap) * nb);
  st.iq_c = take(static_cast<size_t>(rows_cap) * nb);
  st.ks = take(nb * kAttnKeyTile);
  st.kt8 = take(nb * 8 * kAttnKeyTile);
  st.tmp = reinterpret_cast<uint8_t*>(take(nb * 34 / 4 + 1));
  st.stg = reinterpret_cast<uint8_t*>(take(nb * 8 * kAttnKeyTile + 16));  // kAttnKeyTile * nb * 32 bytes + 64
  for (int32_t kvh = a.kv_head_begin; kvh < a.kv_head_end; ++kvh)
    for (int32_t q0 = 0; q0 < a.n_q; q0 += q_tile) {
      const int32_t q1 = std::min(a.n_q, q0 + q_tile);
      if (!R::kIntKeys && (q1 - q0) * group >= kMinRowsLanes) {
        attend_lanes<R>(a, kvh, q0, q1, st);
      } else {
        attend_query_tile<kMinRowsTransposed, R>(a, kvh, q0, q1, st);
      }
    }
}

// The kernel table's AttentionFn (arguments checked by
// kernels::paged_attention): tiles of at least kMinRowsF32 (f32 K/V) or
// kMinRowsF16 (f16 K/V, converted once per tile when transposed) query rows
// score from the transposed key tile; quantized keys always do (integer dots).
template <int kMinRowsF32, int kMinRowsF16>
void paged_attention_kernel(const AttentionArgs& a) {
  switch (a.kv.dtype) {
    case DType::kF16: attend<kMinRowsF16, RowF16>(a); break;
    case DType::kQ8_0: attend<kMinRowsF16, RowQ8>(a); break;
    case DType::kQ4_0: attend<kMinRowsF16, RowQ4>(a); break;
    default: attend<kMinRowsF32, RowF32>(a); break;
  }
}
