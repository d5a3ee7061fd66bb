// Float matmul over the file's row layout (no packed copy), for one ISA's V
// (simd_<isa>.h; included inside that ISA's namespace by unpacked_<isa>.cc).
// Weights read in place: quantization's calibration pass, whose observer
// rewrites the F32 weights of each layer as GPTQ reaches it
// (quant/calibration.h), and a model whose packed copy could not be
// allocated. Every output element y[t][r] is the same sum however its row
// and token are tiled (and so however the rows are split between threads):
// 16-lane FMAs over n_in in order, the last partial chunk zero-padded, one
// horizontal sum. It differs from the scalar reference (rows of
// matmul_scalar.cc) only by rounding.

// One weight row's 16 elements from element i on, as floats.
struct LoadF32 {
  static constexpr size_t kBytes = 4;
  static V::F load(const uint8_t* row, int64_t i) { return V::load_f(reinterpret_cast<const float*>(row) + i); }
};
struct LoadF16 {
  static constexpr size_t kBytes = 2;
  static V::F load(const uint8_t* row, int64_t i) { return V::load_f16(row + 2 * i); }
};
struct LoadBF16 {
  static constexpr size_t kBytes = 2;
  static V::F load(const uint8_t* row, int64_t i) { return V::load_bf16(row + 2 * i); }
};

// y[t + j][r + rr] for rr < R, j < T.
template <class L, int R, int T>
void unpacked_tile(const MatmulArgs& a, int64_t r, int64_t t) {
  constexpr int kLanes = V::kLanes;
  const int64_t n_in = a.n_in;
  const uint8_t* w[R];
  const float* x[T];
  for (int rr = 0; rr < R; ++rr) w[rr] = a.w + (r + rr) * a.row_bytes;
  for (int j = 0; j < T; ++j) x[j] = a.x + (t + j) * a.x_stride;
  V::F acc[R][T];
  for (int rr = 0; rr < R; ++rr)
    for (int j = 0; j < T; ++j) acc[rr][j] = V::zero_f();
  int64_t i = 0;
  for (; i + kLanes <= n_in; i += kLanes) {
    V::F xv[T];
    for (int j = 0; j < T; ++j) xv[j] = V::load_f(x[j] + i);
    for (int rr = 0; rr < R; ++rr) {
      const V::F wv = L::load(w[rr], i);
      for (int j = 0; j < T; ++j) acc[rr][j] = V::fmadd(wv, xv[j], acc[rr][j]);
    }
  }
  if (i < n_in) {
    const int n = static_cast<int>(n_in - i);
    V::F xv[T];
    for (int j = 0; j < T; ++j) xv[j] = V::load_f_part(x[j] + i, n);
    for (int rr = 0; rr < R; ++rr) {
      alignas(64) uint8_t tail[kLanes * L::kBytes] = {};  // zero bytes read as 0 in every format
      std::memcpy(tail, w[rr] + i * L::kBytes, static_cast<size_t>(n) * L::kBytes);
      const V::F wv = L::load(tail, 0);
      for (int j = 0; j < T; ++j) acc[rr][j] = V::fmadd(wv, xv[j], acc[rr][j]);
    }
  }
  for (int rr = 0; rr < R; ++rr)
    for (int j = 0; j < T; ++j) a.y[(t + j) * a.y_stride + r + rr] = V::hsum(acc[rr][j]);
}

// Rows r0..r1 for every token: tiles of R rows x T tokens, then the
// remaining tokens one at a time (R rows) and the remaining rows one at a time.
template <class L, int R, int T>
void unpacked_rows(const MatmulArgs& a, int64_t r0, int64_t r1) {
  auto sweep = [&]<int RR>(int64_t r) {
    int64_t t = 0;
    for (; t + T <= a.n_tokens; t += T) unpacked_tile<L, RR, T>(a, r, t);
    for (; t < a.n_tokens; ++t) unpacked_tile<L, RR, 1>(a, r, t);
  };
  int64_t r = r0;
  for (; r + R <= r1; r += R) sweep.template operator()<R>(r);
  for (; r < r1; ++r) sweep.template operator()<1>(r);
}

template <int R, int T>
void register_unpacked(IsaKernels& k) {
  k.unpacked[static_cast<int>(WKind::kF32)] = unpacked_rows<LoadF32, R, T>;
  k.unpacked[static_cast<int>(WKind::kF16)] = unpacked_rows<LoadF16, R, T>;
  k.unpacked[static_cast<int>(WKind::kBF16)] = unpacked_rows<LoadBF16, R, T>;
}
