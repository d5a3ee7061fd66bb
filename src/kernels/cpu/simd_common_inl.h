// Shared 256-bit integer primitives and the tile driver for the x86 SIMD
// matmul kernels. Textually included (no includes, no namespace of its own)
// inside an anonymous namespace of each ISA translation unit, so every ISA
// gets its own copy compiled with its own flags (no ODR mixing).
//
// With AVX512-VNNI (+VL) the u8 x s8 and s16 x s16 dots use vpdpbusd /
// vpdpwssd; otherwise AVX2 maddubs + madd.

inline __m256i dot_u8s8(__m256i u, __m256i s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

// acc + pairwise int16 products a * b summed into int32 lanes.
inline __m256i madd_acc(__m256i acc, __m256i a, __m256i b) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpwssd_epi32(acc, a, b);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
#endif
}

inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

inline __m256i loadu256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// 16 packed bytes -> 32 nibbles in element order (low nibbles, then high).
inline __m256i nibbles32(const uint8_t* qs) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(v, 4), v);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// 0x10 in byte j where bit j of the little-endian u32 at qh_bytes is set.
inline __m256i high_bits32(const uint8_t* qh_bytes) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
#if defined(__AVX512BW__) && defined(__AVX512VL__)
  return _mm256_maskz_mov_epi8(qh, _mm256_set1_epi8(0x10));
#else
  const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                        2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(qh)), shuf);
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  const __m256i on = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
  return _mm256_and_si256(on, _mm256_set1_epi8(0x10));
#endif
}

using TileFn = void (*)(const MatmulArgs& a, int64_t row, int64_t t0);

// Decode (1 token): stream each row once. Prefill: a block of rows that
// fits in L1/L2 is reused across groups of up to 4 tokens (each weight
// block is unpacked once per group of tokens).
// Weight rows kept hot while every token streams past them: sized for L2,
// since the activations (int8 plus lane-wise scales) outweigh the weights.
inline int64_t kRowBlockBytes = 262144;

template <TileFn F1, TileFn F2, TileFn F3, TileFn F4>
void rows_tiled(const MatmulArgs& a, int64_t r0, int64_t r1) {
  if (a.n_tokens == 1) {
    for (int64_t r = r0; r < r1; ++r) F1(a, r, 0);
    return;
  }
  const int64_t row_block =
      std::clamp<int64_t>(kRowBlockBytes / static_cast<int64_t>(a.row_bytes + 1), 4, 1024);
  for (int64_t rb = r0; rb < r1; rb += row_block) {
    const int64_t re = std::min(r1, rb + row_block);
    for (int64_t t = 0; t < a.n_tokens; t += 4) {
      const int64_t nt = std::min<int64_t>(4, a.n_tokens - t);
      for (int64_t r = rb; r < re; ++r) {
        switch (nt) {
          case 4: F4(a, r, t); break;
          case 3: F3(a, r, t); break;
          case 2: F2(a, r, t); break;
          default: F1(a, r, t); break;
        }
      }
    }
  }
}

#define PAGODA_TILED(tile) rows_tiled<tile<1>, tile<2>, tile<3>, tile<4>>

// As rows_tiled, but prefill goes two rows at a time (G* compute rows r and
// r + 1) so each activation load feeds two weight rows.
template <TileFn F1, TileFn F2, TileFn F3, TileFn F4, TileFn G1, TileFn G2, TileFn G3, TileFn G4>
void rows_tiled2(const MatmulArgs& a, int64_t r0, int64_t r1) {
  if (a.n_tokens == 1) {
    for (int64_t r = r0; r < r1; ++r) F1(a, r, 0);
    return;
  }
  const int64_t row_block =
      std::clamp<int64_t>(kRowBlockBytes / static_cast<int64_t>(a.row_bytes + 1), 4, 1024) / 2 * 2;
  for (int64_t rb = r0; rb < r1; rb += row_block) {
    const int64_t re = std::min(r1, rb + row_block);
    for (int64_t t = 0; t < a.n_tokens; t += 4) {
      const int64_t nt = std::min<int64_t>(4, a.n_tokens - t);
      int64_t r = rb;
      for (; r + 2 <= re; r += 2) {
        switch (nt) {
          case 4: G4(a, r, t); break;
          case 3: G3(a, r, t); break;
          case 2: G2(a, r, t); break;
          default: G1(a, r, t); break;
        }
      }
      if (r < re) {
        switch (nt) {
          case 4: F4(a, r, t); break;
          case 3: F3(a, r, t); break;
          case 2: F2(a, r, t); break;
          default: F1(a, r, t); break;
        }
      }
    }
  }
}

#define PAGODA_TILED2(tile, tile2) \
  rows_tiled2<tile<1>, tile<2>, tile<3>, tile<4>, tile2<1>, tile2<2>, tile2<3>, tile2<4>>
