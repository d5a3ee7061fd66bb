// Tiles for the K-quants (256-element super-blocks) against Q8_K
// activations: one row x T tokens. Integer sums per super-block (sub-block
// scales applied with madd / vpdpwssd), one float FMA per super-block.
// Textually included by the ISA translation units. Activation pointers:
// KActs (kernel_table.h).

// The 12 packed bytes of 6-bit (scale, min) pairs -> sc[0..7], mn[0..7]
// (same result as ref::get_scale_min_k4 for j = 0..7, with word operations).
inline void unpack_scales_k4(const uint8_t* packed, uint8_t* sc, uint8_t* mn) {
  uint32_t u[3];
  std::memcpy(u, packed, 12);
  const uint32_t k6 = 0x3f3f3f3f, k4 = 0x0f0f0f0f, k2 = 0x03030303;
  const uint32_t sc_lo = u[0] & k6;                                 // sc 0..3
  const uint32_t mn_lo = u[1] & k6;                                 // mn 0..3
  const uint32_t sc_hi = (u[2] & k4) | (((u[0] >> 6) & k2) << 4);   // sc 4..7
  const uint32_t mn_hi = ((u[2] >> 4) & k4) | (((u[1] >> 6) & k2) << 4);  // mn 4..7
  std::memcpy(sc, &sc_lo, 4);
  std::memcpy(sc + 4, &sc_hi, 4);
  std::memcpy(mn, &mn_lo, 4);
  std::memcpy(mn + 4, &mn_hi, 4);
}

// Q4_K / Q5_K: 4 chunks of 64 elements, low nibbles = sub-block 2c, high =
// 2c+1; Q5_K adds bit 2c / 2c+1 of qh[l] as bit 4.
template <class Block, int T>
void tile_k45(const MatmulArgs& a, int64_t row, int64_t t0) {
  constexpr bool kFive = std::is_same_v<Block, ref::BlockQ5_K>;
  const auto* w = reinterpret_cast<const Block*>(a.w + row * a.row_bytes);
  const int64_t nb = a.n_in / kQK_K;
  const KActs<T> x(a, t0);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const Block& blk = w[b];
    uint8_t sc[8], mn[8];
    unpack_scales_k4(blk.scales, sc, mn);
    __m256i sum_lo[T], sum_hi[T];
    for (int t = 0; t < T; ++t) sum_lo[t] = sum_hi[t] = _mm256_setzero_si256();
    __m256i qh = _mm256_setzero_si256();
    if constexpr (kFive) qh = loadu256(blk.qh);
    for (int c = 0; c < 4; ++c) {
      const __m256i raw = loadu256(blk.qs + 32 * c);
      __m256i lo = _mm256_and_si256(raw, m4);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
      if constexpr (kFive) {
        const __m256i b16 = _mm256_set1_epi8(0x10);
        lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(qh, 2 * c), 4), b16));
        hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(qh, 2 * c + 1), 4), b16));
      }
      const __m256i s_lo = _mm256_set1_epi16(sc[2 * c]);
      const __m256i s_hi = _mm256_set1_epi16(sc[2 * c + 1]);
      for (int t = 0; t < T; ++t) {
        const int8_t* xp = x.xq[t] + b * kQK_K + 64 * c;
        sum_lo[t] = madd_acc(sum_lo[t], _mm256_maddubs_epi16(lo, loadu256(xp)), s_lo);
        sum_hi[t] = madd_acc(sum_hi[t], _mm256_maddubs_epi16(hi, loadu256(xp + 32)), s_hi);
      }
    }
    // mins, each repeated for the two 16-sums of its 32-element sub-block
    __m128i mv;
    std::memcpy(&mv, mn, 8);  // low 8 bytes used
    const __m256i m16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mv, mv));
    const float d = h2f(blk.d), dmin = h2f(blk.dmin);
    for (int t = 0; t < T; ++t) {
      const float dx = x.xd[t][b];
      const __m256i summ = _mm256_madd_epi16(loadu256(x.bs[t] + b * 16), m16);
      const __m256 p = _mm256_cvtepi32_ps(_mm256_add_epi32(sum_lo[t], sum_hi[t]));
      acc[t] = _mm256_fmadd_ps(p, _mm256_set1_ps(d * dx), acc[t]);
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(summ), _mm256_set1_ps(-dmin * dx), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) a.y[(t0 + t) * a.y_stride + row] = hsum256(acc[t]);
}

// Q6_K: two halves of 128; q in 0..63 (offset 32 folded in via the Q8_K
// block sums), 16 int8 scales of 16 elements each.
template <int T>
void tile_q6_k(const MatmulArgs& a, int64_t row, int64_t t0) {
  const auto* w = reinterpret_cast<const ref::BlockQ6_K*>(a.w + row * a.row_bytes);
  const int64_t nb = a.n_in / kQK_K;
  const KActs<T> x(a, t0);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m30 = _mm256_set1_epi8(0x30);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const ref::BlockQ6_K& blk = w[b];
    __m256i sumi[T];
    for (int t = 0; t < T; ++t) sumi[t] = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i ql0 = loadu256(blk.ql + 64 * h);
      const __m256i ql1 = loadu256(blk.ql + 64 * h + 32);
      const __m256i qh = loadu256(blk.qh + 32 * h);
      __m256i q[4];
      q[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
      q[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
      q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m30));
      q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                             _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
      for (int k = 0; k < 4; ++k) {
        const int8_t* s = blk.scales + 8 * h + 2 * k;
        const __m256i sv = _mm256_set_m128i(_mm_set1_epi16(s[1]), _mm_set1_epi16(s[0]));
        for (int t = 0; t < T; ++t) {
          const int8_t* xp = x.xq[t] + b * kQK_K + 128 * h + 32 * k;
          sumi[t] = madd_acc(sumi[t], _mm256_maddubs_epi16(q[k], loadu256(xp)), sv);
        }
      }
    }
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scales)));
    const float d = h2f(blk.d);
    for (int t = 0; t < T; ++t) {
      const __m256i off = _mm256_madd_epi16(sc16, loadu256(x.bs[t] + b * 16));
      const __m256i s = _mm256_sub_epi32(sumi[t], _mm256_slli_epi32(off, 5));
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(d * x.xd[t][b]), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) a.y[(t0 + t) * a.y_stride + row] = hsum256(acc[t]);
}

template <int T> void tile_q4_k(const MatmulArgs& a, int64_t r, int64_t t) { tile_k45<ref::BlockQ4_K, T>(a, r, t); }
template <int T> void tile_q5_k(const MatmulArgs& a, int64_t r, int64_t t) { tile_k45<ref::BlockQ5_K, T>(a, r, t); }
