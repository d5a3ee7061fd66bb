// Tiles for F32 / F16 / BF16 weights against f32 activations: weights
// widened to f32 once per group of T tokens, f32 FMA. 512-bit vectors when
// the translation unit has AVX-512F, else 256-bit. Textually included by
// the ISA translation units.

#if defined(__AVX512F__)
using VecF = __m512;
constexpr int kVecW = 16;
inline VecF vzero() { return _mm512_setzero_ps(); }
inline VecF vloadx(const float* p) { return _mm512_loadu_ps(p); }
inline VecF vfma(VecF a, VecF b, VecF c) { return _mm512_fmadd_ps(a, b, c); }
inline VecF vadd(VecF a, VecF b) { return _mm512_add_ps(a, b); }
inline float vhsum(VecF v) { return _mm512_reduce_add_ps(v); }
inline __m256i load_half_vec(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
struct LoadF32 {
  static constexpr int kBytes = 4;
  static VecF load(const uint8_t* p) { return _mm512_loadu_ps(p); }
};
struct LoadF16 {
  static constexpr int kBytes = 2;
  static VecF load(const uint8_t* p) { return _mm512_cvtph_ps(load_half_vec(p)); }
};
struct LoadBF16 {
  static constexpr int kBytes = 2;
  static VecF load(const uint8_t* p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(load_half_vec(p)), 16));
  }
};
#else
using VecF = __m256;
constexpr int kVecW = 8;
inline VecF vzero() { return _mm256_setzero_ps(); }
inline VecF vloadx(const float* p) { return _mm256_loadu_ps(p); }
inline VecF vfma(VecF a, VecF b, VecF c) { return _mm256_fmadd_ps(a, b, c); }
inline VecF vadd(VecF a, VecF b) { return _mm256_add_ps(a, b); }
inline float vhsum(VecF v) { return hsum256(v); }
inline __m128i load_half_vec(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
struct LoadF32 {
  static constexpr int kBytes = 4;
  static VecF load(const uint8_t* p) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p)); }
};
struct LoadF16 {
  static constexpr int kBytes = 2;
  static VecF load(const uint8_t* p) { return _mm256_cvtph_ps(load_half_vec(p)); }
};
struct LoadBF16 {
  static constexpr int kBytes = 2;
  static VecF load(const uint8_t* p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(load_half_vec(p)), 16));
  }
};
#endif

inline float scalar_weight(const uint8_t* p, int bytes, int which) {
  if (bytes == 4) {
    float v;
    std::memcpy(&v, p, 4);
    return v;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return which == 1 ? h2f(h) : fp32_from_bits(static_cast<uint32_t>(h) << 16);
}

// R rows x T tokens: each x vector load feeds R FMAs, each widened weight
// vector T FMAs.
template <class L, int T, int R>
void tile_float(const MatmulArgs& a, int64_t row, int64_t t0) {
  constexpr int kU = (T == 1 && R == 1) ? 4 : (T * R <= 4 ? 2 : 1);
  const float* x[T];
  for (int t = 0; t < T; ++t) x[t] = a.x + (t0 + t) * a.x_stride;
  const uint8_t* p[R];
  for (int r = 0; r < R; ++r) p[r] = a.w + (row + r) * a.row_bytes;
  VecF acc[kU][R][T];
  for (int u = 0; u < kU; ++u)
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < T; ++t) acc[u][r][t] = vzero();
  const int64_t n = a.n_in;
  int64_t i = 0;
  for (; i + kU * kVecW <= n; i += kU * kVecW)
    for (int u = 0; u < kU; ++u) {
      VecF wv[R];
      for (int r = 0; r < R; ++r) wv[r] = L::load(p[r] + (i + u * kVecW) * L::kBytes);
      for (int t = 0; t < T; ++t) {
        const VecF xv = vloadx(x[t] + i + u * kVecW);
        for (int r = 0; r < R; ++r) acc[u][r][t] = vfma(wv[r], xv, acc[u][r][t]);
      }
    }
  for (; i + kVecW <= n; i += kVecW)
    for (int r = 0; r < R; ++r) {
      const VecF wv = L::load(p[r] + i * L::kBytes);
      for (int t = 0; t < T; ++t) acc[0][r][t] = vfma(wv, vloadx(x[t] + i), acc[0][r][t]);
    }
  constexpr int kWhich = std::is_same_v<L, LoadF16> ? 1 : 2;
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) {
      for (int u = 1; u < kU; ++u) acc[0][r][t] = vadd(acc[0][r][t], acc[u][r][t]);
      float sum = vhsum(acc[0][r][t]);
      for (int64_t k = i; k < n; ++k) sum += scalar_weight(p[r] + k * L::kBytes, L::kBytes, kWhich) * x[t][k];
      a.y[(t0 + t) * a.y_stride + row + r] = sum;
    }
}

template <int T> void tile_f32(const MatmulArgs& a, int64_t r, int64_t t) { tile_float<LoadF32, T, 1>(a, r, t); }
template <int T> void tile_f16(const MatmulArgs& a, int64_t r, int64_t t) { tile_float<LoadF16, T, 1>(a, r, t); }
template <int T> void tile_bf16(const MatmulArgs& a, int64_t r, int64_t t) { tile_float<LoadBF16, T, 1>(a, r, t); }
template <int T> void tile2_f32(const MatmulArgs& a, int64_t r, int64_t t) { tile_float<LoadF32, T, 2>(a, r, t); }
template <int T> void tile2_f16(const MatmulArgs& a, int64_t r, int64_t t) { tile_float<LoadF16, T, 2>(a, r, t); }
template <int T> void tile2_bf16(const MatmulArgs& a, int64_t r, int64_t t) { tile_float<LoadBF16, T, 2>(a, r, t); }

float dot_f32_simd(const float* a, const float* b, int64_t n) {
  VecF acc[4] = {vzero(), vzero(), vzero(), vzero()};
  int64_t i = 0;
  for (; i + 4 * kVecW <= n; i += 4 * kVecW)
    for (int u = 0; u < 4; ++u) acc[u] = vfma(vloadx(a + i + u * kVecW), vloadx(b + i + u * kVecW), acc[u]);
  for (; i + kVecW <= n; i += kVecW) acc[0] = vfma(vloadx(a + i), vloadx(b + i), acc[0]);
  float sum = vhsum(vadd(vadd(acc[0], acc[1]), vadd(acc[2], acc[3])));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

IsaKernels make_isa_table() {
  IsaKernels k;
  auto set = [&](WKind kind, RowsFn fn) { k.rows[static_cast<int>(kind)] = fn; };
  set(WKind::kF32, PAGODA_TILED2(tile_f32, tile2_f32));
  set(WKind::kF16, PAGODA_TILED2(tile_f16, tile2_f16));
  set(WKind::kBF16, PAGODA_TILED2(tile_bf16, tile2_bf16));
  set(WKind::kQ8_0, PAGODA_TILED(tile_q8_0));
  set(WKind::kQ4_0, PAGODA_TILED(tile_q4_0));
  set(WKind::kQ4_1, PAGODA_TILED(tile_q4_1));
  set(WKind::kQ5_0, PAGODA_TILED(tile_q5_0));
  set(WKind::kQ5_1, PAGODA_TILED(tile_q5_1));
  set(WKind::kQ4_K, PAGODA_TILED(tile_q4_k));
  set(WKind::kQ5_K, PAGODA_TILED(tile_q5_k));
  set(WKind::kQ6_K, PAGODA_TILED(tile_q6_k));
  k.dot_f32 = dot_f32_simd;
  return k;
}
