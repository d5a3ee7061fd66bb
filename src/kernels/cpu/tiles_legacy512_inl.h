// AVX-512 tiles for the 32-element block types: two blocks per zmm (one
// vpdpbusd per token per block pair); the pair's weight scales are spread
// to lanes once (vcvtph2ps + vpermps) and meet the activations' lane-wise
// scales (ActQ8::d16 / s16) in one multiply and two FMAs per token. An odd last
// block goes through the 256-bit legacy_step. Textually included by
// matmul_avx512.cc after tiles_legacy_inl.h.

// 32 + 32 nibbles of two blocks in element order [A 0..31 | B 0..31].
inline __m512i nibbles64(const uint8_t* qa, const uint8_t* qb) {
  const __m256i v = _mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qa))),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(qb)), 1);
  __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(v), _mm256_srli_epi16(v, 4), 1);
  z = _mm512_and_si512(z, _mm512_set1_epi8(0x0F));
  return _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0));
}

inline __m512i high_bits64(const uint8_t* ha, const uint8_t* hb) {
  uint32_t a, b;
  std::memcpy(&a, ha, 4);
  std::memcpy(&b, hb, 4);
  const __mmask64 m = static_cast<__mmask64>(a) | (static_cast<__mmask64>(b) << 32);
  return _mm512_maskz_mov_epi8(m, _mm512_set1_epi8(0x10));
}

// [half a, half b] -> [float a, float b, 0, 0]
inline __m128 halves2(uint16_t a, uint16_t b) {
  return _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(a | (static_cast<uint32_t>(b) << 16))));
}

template <class D> __m512i pair_q(const typename D::Block& a, const typename D::Block& b);
template <> inline __m512i pair_q<DecQ8_0>(const ref::BlockQ8_0& a, const ref::BlockQ8_0& b) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(loadu256(a.qs)), loadu256(b.qs), 1);
}
template <> inline __m512i pair_q<DecQ4_0>(const ref::BlockQ4_0& a, const ref::BlockQ4_0& b) {
  return nibbles64(a.qs, b.qs);
}
template <> inline __m512i pair_q<DecQ4_1>(const ref::BlockQ4_1& a, const ref::BlockQ4_1& b) {
  return nibbles64(a.qs, b.qs);
}
template <> inline __m512i pair_q<DecQ5_0>(const ref::BlockQ5_0& a, const ref::BlockQ5_0& b) {
  return _mm512_or_si512(nibbles64(a.qs, b.qs), high_bits64(a.qh, b.qh));
}
template <> inline __m512i pair_q<DecQ5_1>(const ref::BlockQ5_1& a, const ref::BlockQ5_1& b) {
  return _mm512_or_si512(nibbles64(a.qs, b.qs), high_bits64(a.qh, b.qh));
}

// Offset coefficients cw of the pair (w = dw * q + cw).
template <class D>
inline __m128 pair_c(const typename D::Block& a, const typename D::Block& b, __m128 dw2) {
  if constexpr (std::is_same_v<D, DecQ4_0>) return _mm_mul_ps(dw2, _mm_set1_ps(-8.0f));
  if constexpr (std::is_same_v<D, DecQ5_0>) return _mm_mul_ps(dw2, _mm_set1_ps(-16.0f));
  if constexpr (std::is_same_v<D, DecQ4_1> || std::is_same_v<D, DecQ5_1>) return halves2(a.m, b.m);
  return _mm_setzero_ps();
}

template <class D, int T>
inline void pair_step(const typename D::Block& A, const typename D::Block& B, int64_t b,
                      const int8_t* const* xq, const float* const* d16, const float* const* s16,
                      __m512* acc) {
  const __m512i kSpread = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  __m512i q = pair_q<D>(A, B);
  const __m128 dw2 = halves2(A.d, B.d);
  __mmask64 neg = 0;
  if constexpr (D::kSigned) {
    neg = _mm512_movepi8_mask(q);
    q = _mm512_abs_epi8(q);
  }
  const __m512 dw16 = _mm512_permutexvar_ps(kSpread, _mm512_castps128_ps512(dw2));
  // Q4_0 / Q5_0: w = dw * (q - k), so acc += dw * (p * dx - k * s): no
  // per-pair offset vector to build.
  constexpr bool kConstOffset = std::is_same_v<D, DecQ4_0> || std::is_same_v<D, DecQ5_0>;
  [[maybe_unused]] __m512 cw16;
  if constexpr (!D::kSigned && !kConstOffset)
    cw16 = _mm512_permutexvar_ps(kSpread, _mm512_castps128_ps512(pair_c<D>(A, B, dw2)));
  [[maybe_unused]] const __m512 neg_k = _mm512_set1_ps(std::is_same_v<D, DecQ4_0> ? -8.0f : -16.0f);
  for (int t = 0; t < T; ++t) {
    __m512i xv = _mm512_loadu_si512(xq[t] + 32 * b);
    if constexpr (D::kSigned) xv = _mm512_mask_sub_epi8(xv, neg, _mm512_setzero_si512(), xv);
    const __m512 p = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), q, xv));
    if constexpr (kConstOffset) {
      const __m512 off = _mm512_mul_ps(neg_k, _mm512_loadu_ps(s16[t] + 8 * b));
      acc[t] = _mm512_fmadd_ps(dw16, _mm512_fmadd_ps(p, _mm512_loadu_ps(d16[t] + 8 * b), off), acc[t]);
    } else {
      acc[t] = _mm512_fmadd_ps(p, _mm512_mul_ps(dw16, _mm512_loadu_ps(d16[t] + 8 * b)), acc[t]);
      if constexpr (!D::kSigned) acc[t] = _mm512_fmadd_ps(cw16, _mm512_loadu_ps(s16[t] + 8 * b), acc[t]);
    }
  }
}

template <class D, int T>
void tile_legacy512(const MatmulArgs& a, int64_t row, int64_t t0) {
  using Block = typename D::Block;
  constexpr int kU = T == 1 ? 2 : 1;
  const auto* w = reinterpret_cast<const Block*>(a.w + row * a.row_bytes);
  const int64_t nb = a.n_in / 32;
  const int8_t* xq[T];
  const float* xd[T];
  const float* xs[T];
  const float* d16[T];
  const float* s16[T];
  const int64_t stride16 = nb / 2 * 16;
  for (int t = 0; t < T; ++t) {
    xq[t] = a.act.qs + (t0 + t) * a.n_in;
    xd[t] = a.act.d + (t0 + t) * nb;
    xs[t] = a.act.s + (t0 + t) * nb;
    d16[t] = a.act.d16 + (t0 + t) * stride16;
    s16[t] = a.act.s16 + (t0 + t) * stride16;
  }
  __m512 acc[kU][T];
  for (int u = 0; u < kU; ++u)
    for (int t = 0; t < T; ++t) acc[u][t] = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 2 * kU <= nb; b += 2 * kU)
    for (int u = 0; u < kU; ++u) pair_step<D, T>(w[b + 2 * u], w[b + 2 * u + 1], b + 2 * u, xq, d16, s16, acc[u]);
  for (; b + 2 <= nb; b += 2) pair_step<D, T>(w[b], w[b + 1], b, xq, d16, s16, acc[0]);
  __m256 tail[T];
  float tail_corr[T];
  for (int t = 0; t < T; ++t) {
    tail[t] = _mm256_setzero_ps();
    tail_corr[t] = 0;
  }
  if (b < nb) legacy_step<D, T>(w[b], b, xq, xd, xs, tail, tail_corr);
  for (int t = 0; t < T; ++t) {
    __m512 s = acc[0][t];
    for (int u = 1; u < kU; ++u) s = _mm512_add_ps(s, acc[u][t]);
    a.y[(t0 + t) * a.y_stride + row] = _mm512_reduce_add_ps(s) + hsum256(tail[t]) + tail_corr[t];
  }
}

template <int T> void tile512_q8_0(const MatmulArgs& a, int64_t r, int64_t t) { tile_legacy512<DecQ8_0, T>(a, r, t); }
template <int T> void tile512_q4_0(const MatmulArgs& a, int64_t r, int64_t t) { tile_legacy512<DecQ4_0, T>(a, r, t); }
template <int T> void tile512_q4_1(const MatmulArgs& a, int64_t r, int64_t t) { tile_legacy512<DecQ4_1, T>(a, r, t); }
template <int T> void tile512_q5_0(const MatmulArgs& a, int64_t r, int64_t t) { tile_legacy512<DecQ5_0, T>(a, r, t); }
template <int T> void tile512_q5_1(const MatmulArgs& a, int64_t r, int64_t t) { tile_legacy512<DecQ5_1, T>(a, r, t); }


// Two weight rows x T tokens for the unsigned 32-element types: each
// token's activations and lane-wise scales are loaded once for both rows.
template <class D, int T>
inline void pair_step2(const typename D::Block* w0, const typename D::Block* w1, int64_t b, const int8_t* const* xq,
                       const float* const* d16, const float* const* s16, __m512* acc0, __m512* acc1) {
  static_assert(!D::kSigned);
  const __m512i kSpread = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512i q0 = pair_q<D>(w0[b], w0[b + 1]);
  const __m512i q1 = pair_q<D>(w1[b], w1[b + 1]);
  const __m128 dw2_0 = halves2(w0[b].d, w0[b + 1].d);
  const __m128 dw2_1 = halves2(w1[b].d, w1[b + 1].d);
  const __m512 dw0 = _mm512_permutexvar_ps(kSpread, _mm512_castps128_ps512(dw2_0));
  const __m512 dw1 = _mm512_permutexvar_ps(kSpread, _mm512_castps128_ps512(dw2_1));
  constexpr bool kConstOffset = std::is_same_v<D, DecQ4_0> || std::is_same_v<D, DecQ5_0>;
  [[maybe_unused]] __m512 cw0, cw1;
  if constexpr (!kConstOffset) {
    cw0 = _mm512_permutexvar_ps(kSpread, _mm512_castps128_ps512(pair_c<D>(w0[b], w0[b + 1], dw2_0)));
    cw1 = _mm512_permutexvar_ps(kSpread, _mm512_castps128_ps512(pair_c<D>(w1[b], w1[b + 1], dw2_1)));
  }
  [[maybe_unused]] const __m512 neg_k = _mm512_set1_ps(std::is_same_v<D, DecQ4_0> ? -8.0f : -16.0f);
  for (int t = 0; t < T; ++t) {
    const __m512i xv = _mm512_loadu_si512(xq[t] + 32 * b);
    const __m512 d = _mm512_loadu_ps(d16[t] + 8 * b);
    const __m512 s = _mm512_loadu_ps(s16[t] + 8 * b);
    const __m512 p0 = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), q0, xv));
    const __m512 p1 = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), q1, xv));
    if constexpr (kConstOffset) {
      const __m512 off = _mm512_mul_ps(neg_k, s);
      acc0[t] = _mm512_fmadd_ps(dw0, _mm512_fmadd_ps(p0, d, off), acc0[t]);
      acc1[t] = _mm512_fmadd_ps(dw1, _mm512_fmadd_ps(p1, d, off), acc1[t]);
    } else {
      acc0[t] = _mm512_fmadd_ps(cw0, s, _mm512_fmadd_ps(p0, _mm512_mul_ps(dw0, d), acc0[t]));
      acc1[t] = _mm512_fmadd_ps(cw1, s, _mm512_fmadd_ps(p1, _mm512_mul_ps(dw1, d), acc1[t]));
    }
  }
}

// Rows `row` and `row + 1`; an odd last block goes through the 1-row path.
template <class D, int T>
void tile2_legacy512(const MatmulArgs& a, int64_t row, int64_t t0) {
  using Block = typename D::Block;
  const int64_t nb = a.n_in / 32;
  if (nb % 2 != 0) {  // rare shapes: keep the single-row tile's tail handling
    tile_legacy512<D, T>(a, row, t0);
    tile_legacy512<D, T>(a, row + 1, t0);
    return;
  }
  const auto* w0 = reinterpret_cast<const Block*>(a.w + row * a.row_bytes);
  const auto* w1 = reinterpret_cast<const Block*>(a.w + (row + 1) * a.row_bytes);
  const int8_t* xq[T];
  const float* d16[T];
  const float* s16[T];
  const int64_t stride16 = nb / 2 * 16;
  for (int t = 0; t < T; ++t) {
    xq[t] = a.act.qs + (t0 + t) * a.n_in;
    d16[t] = a.act.d16 + (t0 + t) * stride16;
    s16[t] = a.act.s16 + (t0 + t) * stride16;
  }
  __m512 acc0[T], acc1[T];
  for (int t = 0; t < T; ++t) acc0[t] = acc1[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; b += 2) pair_step2<D, T>(w0, w1, b, xq, d16, s16, acc0, acc1);
  for (int t = 0; t < T; ++t) {
    a.y[(t0 + t) * a.y_stride + row] = _mm512_reduce_add_ps(acc0[t]);
    a.y[(t0 + t) * a.y_stride + row + 1] = _mm512_reduce_add_ps(acc1[t]);
  }
}

template <int T> void tile512x2_q4_0(const MatmulArgs& a, int64_t r, int64_t t) { tile2_legacy512<DecQ4_0, T>(a, r, t); }
template <int T> void tile512x2_q4_1(const MatmulArgs& a, int64_t r, int64_t t) { tile2_legacy512<DecQ4_1, T>(a, r, t); }
template <int T> void tile512x2_q5_0(const MatmulArgs& a, int64_t r, int64_t t) { tile2_legacy512<DecQ5_0, T>(a, r, t); }
template <int T> void tile512x2_q5_1(const MatmulArgs& a, int64_t r, int64_t t) { tile2_legacy512<DecQ5_1, T>(a, r, t); }

void use_legacy512(IsaKernels& k) {
  k.wants_pair_scales = true;
  k.rows[static_cast<int>(WKind::kQ8_0)] = PAGODA_TILED(tile512_q8_0);
  k.rows[static_cast<int>(WKind::kQ4_0)] = PAGODA_TILED2(tile512_q4_0, tile512x2_q4_0);
  k.rows[static_cast<int>(WKind::kQ4_1)] = PAGODA_TILED2(tile512_q4_1, tile512x2_q4_1);
  k.rows[static_cast<int>(WKind::kQ5_0)] = PAGODA_TILED2(tile512_q5_0, tile512x2_q5_0);
  k.rows[static_cast<int>(WKind::kQ5_1)] = PAGODA_TILED2(tile512_q5_1, tile512x2_q5_1);
}
