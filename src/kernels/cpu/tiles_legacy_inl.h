// Tiles for the 32-element block types against Q8_32 activations: one row x
// T tokens. Each block is w = dw * q + cw with q unpacked to bytes once and
// dotted with every token's int8 block; cw * (dx * sum(qx)) is the offset
// term. Textually included by the ISA translation units (see
// simd_common_inl.h).

struct DecQ8_0 {
  using Block = ref::BlockQ8_0;
  static constexpr bool kSigned = true;
  static __m256i q(const Block& b) { return loadu256(b.qs); }
  static float c(const Block&, float) { return 0; }
};
struct DecQ4_0 {
  using Block = ref::BlockQ4_0;
  static constexpr bool kSigned = false;
  static __m256i q(const Block& b) { return nibbles32(b.qs); }
  static float c(const Block&, float d) { return -8 * d; }
};
struct DecQ4_1 {
  using Block = ref::BlockQ4_1;
  static constexpr bool kSigned = false;
  static __m256i q(const Block& b) { return nibbles32(b.qs); }
  static float c(const Block& b, float) { return h2f(b.m); }
};
struct DecQ5_0 {
  using Block = ref::BlockQ5_0;
  static constexpr bool kSigned = false;
  static __m256i q(const Block& b) { return _mm256_or_si256(nibbles32(b.qs), high_bits32(b.qh)); }
  static float c(const Block&, float d) { return -16 * d; }
};
struct DecQ5_1 {
  using Block = ref::BlockQ5_1;
  static constexpr bool kSigned = false;
  static __m256i q(const Block& b) { return _mm256_or_si256(nibbles32(b.qs), high_bits32(b.qh)); }
  static float c(const Block& b, float) { return h2f(b.m); }
};

template <class D, int T>
inline void legacy_step(const typename D::Block& blk, int64_t b, const int8_t* const* xq,
                        const float* const* xd, const float* const* xs, __m256* acc, float* corr) {
  const __m256i q = D::q(blk);
  const float dw = h2f(blk.d);
  const float cw = D::c(blk, dw);
  if constexpr (D::kSigned) {
    const __m256i aq = _mm256_sign_epi8(q, q);
    for (int t = 0; t < T; ++t) {
      const __m256i xv = _mm256_sign_epi8(loadu256(xq[t] + 32 * b), q);
      const __m256 p = _mm256_cvtepi32_ps(dot_u8s8(aq, xv));
      acc[t] = _mm256_fmadd_ps(p, _mm256_set1_ps(dw * xd[t][b]), acc[t]);
    }
  } else {
    for (int t = 0; t < T; ++t) {
      const __m256 p = _mm256_cvtepi32_ps(dot_u8s8(q, loadu256(xq[t] + 32 * b)));
      acc[t] = _mm256_fmadd_ps(p, _mm256_set1_ps(dw * xd[t][b]), acc[t]);
      corr[t] += cw * xs[t][b];
    }
  }
}

template <class D, int T>
void tile_legacy(const MatmulArgs& a, int64_t row, int64_t t0) {
  using Block = typename D::Block;
  constexpr int kU = T == 1 ? 2 : 1;  // independent chains for decode
  const auto* w = reinterpret_cast<const Block*>(a.w + row * a.row_bytes);
  const int64_t nb = a.n_in / 32;
  const int8_t* xq[T];
  const float* xd[T];
  const float* xs[T];
  for (int t = 0; t < T; ++t) {
    xq[t] = a.act.qs + (t0 + t) * a.n_in;
    xd[t] = a.act.d + (t0 + t) * nb;
    xs[t] = a.act.s + (t0 + t) * nb;
  }
  __m256 acc[kU][T];
  float corr[kU][T];
  for (int u = 0; u < kU; ++u)
    for (int t = 0; t < T; ++t) {
      acc[u][t] = _mm256_setzero_ps();
      corr[u][t] = 0;
    }
  int64_t b = 0;
  for (; b + kU <= nb; b += kU)
    for (int u = 0; u < kU; ++u) legacy_step<D, T>(w[b + u], b + u, xq, xd, xs, acc[u], corr[u]);
  for (; b < nb; ++b) legacy_step<D, T>(w[b], b, xq, xd, xs, acc[0], corr[0]);
  for (int t = 0; t < T; ++t) {
    float sum = 0;
    for (int u = 0; u < kU; ++u) sum += hsum256(acc[u][t]) + corr[u][t];
    a.y[(t0 + t) * a.y_stride + row] = sum;
  }
}

template <int T> void tile_q8_0(const MatmulArgs& a, int64_t r, int64_t t) { tile_legacy<DecQ8_0, T>(a, r, t); }
template <int T> void tile_q4_0(const MatmulArgs& a, int64_t r, int64_t t) { tile_legacy<DecQ4_0, T>(a, r, t); }
template <int T> void tile_q4_1(const MatmulArgs& a, int64_t r, int64_t t) { tile_legacy<DecQ4_1, T>(a, r, t); }
template <int T> void tile_q5_0(const MatmulArgs& a, int64_t r, int64_t t) { tile_legacy<DecQ5_0, T>(a, r, t); }
template <int T> void tile_q5_1(const MatmulArgs& a, int64_t r, int64_t t) { tile_legacy<DecQ5_1, T>(a, r, t); }
