// The kernels over the row-interleaved layouts of cpu/pack.h, written once
// over the vector vocabulary V (cpu/simd_scalar.h lists it; the packed
// integer dots come from cpu/simd_avx512.h and cpu/simd_avx2.h). Each ISA
// translation unit binds `using V = <isa>::V;` and textually includes this
// file inside its anonymous namespace.
// A broadcast activation dword (or float) feeds all 16 rows of a group at
// once, so a register tile of RG groups x T tokens reuses every weight
// vector T times and every activation RG times; outputs of 16 rows are
// stored as one vector.

using VI = V::I;
using VF = V::F;
static_assert(V::kLanes == kPackRows, "one vector holds a group of rows");

// Rows 16g..16g+15 of token t's outputs; a last group that ends past
// n_out (its padding rows) stores only the real rows.
inline void store_group(const MatmulArgs& a, int64_t t, int64_t g, VF v) {
  float* y = a.y + t * a.y_stride + kPackRows * g;
  const int64_t rows = a.n_out - kPackRows * g;
  if (rows >= kPackRows) {
    V::store_f(y, v);
  } else {
    V::store_f_part(y, v, static_cast<int>(rows));
  }
}

// Pointers to T tokens' Q8_K activations (from token t0): int8 values,
// per-256 scales and per-16 sums.
template <int T>
struct KActs {
  const int8_t* xq[T];
  const float* xd[T];
  const int16_t* bs[T];
  KActs(const MatmulArgs& a, int64_t t0) {
    for (int t = 0; t < T; ++t) {
      xq[t] = a.act.qs + (t0 + t) * a.n_in;
      xd[t] = a.act.d + (t0 + t) * (a.n_in / kActBlockK);
      bs[t] = a.act.bsums + (t0 + t) * (a.n_in / kActSumGroup);
    }
  }
};

// Sets every entry of a register tile.
template <class X, int RG, int T>
inline void fill(X (&tile)[RG][T], X v) {
  for (int r = 0; r < RG; ++r)
    for (int t = 0; t < T; ++t) tile[r][t] = v;
}

// How far ahead decode tiles prefetch each group's stream: 2 KiB took F16
// decode of the TinyLlama shape from 12.5 to 14.5-14.7 tok/s at 2 threads
// (1 KiB 14.3-14.5, 4 KiB 14.1-14.2; bench/RESULTS.md 2026-12-04).
constexpr int64_t kFloatPrefetch = 2048;
constexpr int64_t kQuantPrefetch = 2048;

inline VI bcast32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return V::set1_i32(v);
}

// Q4_0: vector i of a block gives two k-steps: low nibbles = elements
// 4i..4i+3, high nibbles = 16+4i..16+4i+3. Weights are u8 0..15, so the
// block dot is sum(q * x) - 8 * sum(x): the int accumulator starts at
// -8 * sum(x) and ends exact.
// Q4_1 (kMin): offset 0 and the m * dx * sum(x) term per block. Q5_0 /
// Q5_1 (kFive): bit 4 of each element from the plane after the nibbles.
template <int kOff, bool kMinTerm, bool kFiveBit>
struct PNib {
  static constexpr int kQBytes = 256 + (kFiveBit ? 64 : 0);
  static constexpr int kOffset = kOff;
  static constexpr bool kMin = kMinTerm;
  static void step(const uint8_t* q, int i, VI& w0, VI& w1) {
    const VI raw = V::load_i(q + 64 * i);
    const VI m4 = V::set1_i8(0x0F);
    w0 = V::and_i(raw, m4);
    w1 = V::and_i(V::srli16(raw, 4), m4);
    if constexpr (kFiveBit) {
      const VI hb = V::load_i(q + 256);
      const VI b4 = V::set1_i8(0x10);
      w0 = V::or_i(w0, V::and_i(V::slli16(hb, 4 - i), b4));
      w1 = V::or_i(w1, V::and_i(V::srli16(hb, i), b4));
    }
  }
  static constexpr int off0(int i) { return 4 * i; }
  static constexpr int off1(int i) { return 16 + 4 * i; }
  static VI dot(VI acc, VI w, VI x) { return V::dot_u8s8(acc, w, x); }
};
using PQ4_0 = PNib<-8, false, false>;
using PQ4_1 = PNib<0, true, false>;
using PQ5_0 = PNib<-16, false, true>;
using PQ5_1 = PNib<0, true, true>;

// Q8_0: stored as q + 128 (u8); V::dot_q8 either takes it as u8 with an
// offset of V::kQ8Offset (-128) * sum(x), or restores the sign (offset 0).
// Vectors 2i, 2i+1.
struct PQ8_0 {
  static constexpr int kQBytes = 512;
  static constexpr int kOffset = V::kQ8Offset;
  static constexpr bool kMin = false;
  static void step(const uint8_t* q, int i, VI& w0, VI& w1) {
    w0 = V::load_i(q + 128 * i);
    w1 = V::load_i(q + 128 * i + 64);
  }
  static constexpr int off0(int i) { return 8 * i; }
  static constexpr int off1(int i) { return 8 * i + 4; }
  static VI dot(VI acc, VI w, VI x) { return V::dot_q8(acc, w, x); }
};

// IQ4's non-linear values + 128 (u8), one 128-bit lane of the lookup.
inline constexpr std::array<uint8_t, 16> kIq4Lut = [] {
  std::array<uint8_t, 16> t{};
  for (int i = 0; i < 16; ++i) t[i] = static_cast<uint8_t>(ref::kIq4nlValues[i] + 128);
  return t;
}();

// IQ4_NL: Q4_0's nibbles as indices into kIq4Lut, then Q8_0's dot (values
// stored + 128).
struct PIQ4NL {
  static constexpr int kQBytes = 256;
  static constexpr int kOffset = V::kQ8Offset;
  static constexpr bool kMin = false;
  static void step(const uint8_t* q, int i, VI& w0, VI& w1) {
    const VI raw = V::load_i(q + 64 * i);
    const VI m4 = V::set1_i8(0x0F);
    const VI lut = V::bcast16(kIq4Lut.data());
    w0 = V::shuffle8(lut, V::and_i(raw, m4));
    w1 = V::shuffle8(lut, V::and_i(V::srli16(raw, 4), m4));
  }
  static constexpr int off0(int i) { return 4 * i; }
  static constexpr int off1(int i) { return 16 + 4 * i; }
  static VI dot(VI acc, VI w, VI x) { return V::dot_q8(acc, w, x); }
};

template <class P, int RG, int T>
void tile_q(const MatmulArgs& a, int64_t g, int64_t t0) {
  const int64_t nb = a.n_in / 32;
  const uint8_t* q[RG];
  const uint8_t* sc[RG];
  for (int r = 0; r < RG; ++r) {
    q[r] = a.wp + (g + r) * a.group_bytes;
    sc[r] = q[r] + nb * P::kQBytes;
  }
  const int8_t* x[T];
  const float* xd[T];
  const int32_t* xs[T];
  const float* xsf[T];  // dx * sum(q) (for the min term)
  for (int t = 0; t < T; ++t) {
    x[t] = a.act.qs + (t0 + t) * a.n_in;
    xd[t] = a.act.d + (t0 + t) * nb;
    xs[t] = a.act.qsum + (t0 + t) * nb;
    xsf[t] = a.act.s + (t0 + t) * nb;
  }
  VF acc[RG][T];
  fill(acc, V::zero_f());
  for (int64_t b = 0; b < nb; ++b) {
    if (T == 1 && a.prefetch) {
      // Decode: the quants' and the scales' streams of every group, each
      // kQuantPrefetch bytes of quants ahead (see kFloatPrefetch).
      for (int r = 0; r < RG; ++r) {
        for (int l = 0; l < P::kQBytes; l += 64) __builtin_prefetch(q[r] + b * P::kQBytes + kQuantPrefetch + l);
        if (b % 2 == 0) __builtin_prefetch(sc[r] + 32 * b + kQuantPrefetch * 32 / P::kQBytes);
      }
    }
    VI is[RG][T];
    for (int t = 0; t < T; ++t) {
      const VI init = V::set1_i32(P::kOffset * xs[t][b]);  // zero when kOffset is
      for (int r = 0; r < RG; ++r) is[r][t] = init;
    }
    for (int i = 0; i < 4; ++i) {
      VI w0[RG], w1[RG];
      for (int r = 0; r < RG; ++r) P::step(q[r] + b * P::kQBytes, i, w0[r], w1[r]);
      for (int t = 0; t < T; ++t) {
        const VI xa = bcast32(x[t] + 32 * b + P::off0(i));
        const VI xb = bcast32(x[t] + 32 * b + P::off1(i));
        for (int r = 0; r < RG; ++r) {
          is[r][t] = P::dot(is[r][t], w0[r], xa);
          is[r][t] = P::dot(is[r][t], w1[r], xb);
        }
      }
    }
    VF dw[RG];
    for (int r = 0; r < RG; ++r) dw[r] = V::load_f16(sc[r] + 32 * b);
    for (int t = 0; t < T; ++t) {
      const VF dx = V::set1_f(xd[t][b]);
      for (int r = 0; r < RG; ++r) acc[r][t] = V::fmadd(V::cvt_i_f(is[r][t]), V::mul(dw[r], dx), acc[r][t]);
    }
    if constexpr (P::kMin) {
      for (int r = 0; r < RG; ++r) {
        const VF mv = V::load_f16(sc[r] + nb * 32 + 32 * b);
        for (int t = 0; t < T; ++t) acc[r][t] = V::fmadd(mv, V::set1_f(xsf[t][b]), acc[r][t]);
      }
    }
  }
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < RG; ++r) store_group(a, t0 + t, g + r, acc[r][t]);
}

// W8A8 (Q8_0R): Q8_0's quant vectors, k-step i (elements 4i..4i+3) at
// 64 * i, one int32 accumulator per row and token over the whole row
// (wrapping is harmless: the end result fits, kMaxRowScaledIn), then one
// multiply by row scale x token scale.
template <int RG, int T>
void tile_q8_0r(const MatmulArgs& a, int64_t g, int64_t t0) {
  const int64_t nv = a.n_in / 4;
  const uint8_t* q[RG];
  for (int r = 0; r < RG; ++r) q[r] = a.wp + (g + r) * a.group_bytes;
  const int8_t* x[T];
  for (int t = 0; t < T; ++t) x[t] = a.act.qs + (t0 + t) * a.n_in;
  VI is[RG][T];
  for (int t = 0; t < T; ++t) {
    // Wraps like the dots: only the final sum is exact.
    const auto off =
        static_cast<int32_t>(static_cast<uint32_t>(V::kQ8Offset) * static_cast<uint32_t>(a.act.qsum[t0 + t]));
    for (int r = 0; r < RG; ++r) is[r][t] = V::set1_i32(off);
  }
  for (int64_t i = 0; i < nv; ++i) {
    V::Q8Prep w[RG];
    for (int r = 0; r < RG; ++r) w[r] = V::prep_q8(V::load_i(q[r] + 64 * i));
    for (int t = 0; t < T; ++t) {
      const VI xv = bcast32(x[t] + 4 * i);
      for (int r = 0; r < RG; ++r) is[r][t] = V::dot_q8_prep(is[r][t], w[r], xv);
    }
  }
  for (int r = 0; r < RG; ++r) {
    const VF dw = V::load_f(reinterpret_cast<const float*>(q[r] + nv * 64));
    for (int t = 0; t < T; ++t)
      store_group(a, t0 + t, g + r, V::mul(V::cvt_i_f(is[r][t]), V::mul(dw, V::set1_f(a.act.d[t0 + t]))));
  }
}

// The super-block tiles (K-quants, IQ4_XS) sum each sub-block's exact
// integer dot times its scale over a 256-element super-block: in integers
// (times 6- or 8-bit scales, one convert per super-block) or, over an
// expanded copy, in float (each dot converted, times its d * sc).

// Sub-block j of super-block b (32 elements: P's 4 k-steps of two vectors)
// dotted with the tile's int8 activations, added to `is`.
template <class P, int RG, int T>
inline void sub_block_dot(const uint8_t* const* q, const int8_t* const* x, int64_t b, int j, VI (&is)[RG][T]) {
  for (int i = 0; i < 4; ++i) {
    VI w0[RG], w1[RG];
    for (int r = 0; r < RG; ++r) P::step(q[r] + (b * 8 + j) * P::kQBytes, i, w0[r], w1[r]);
    for (int t = 0; t < T; ++t) {
      const VI xa = bcast32(x[t] + 256 * b + 32 * j + P::off0(i));
      const VI xb = bcast32(x[t] + 256 * b + 32 * j + P::off1(i));
      for (int r = 0; r < RG; ++r) {
        is[r][t] = P::dot(is[r][t], w0[r], xa);
        is[r][t] = P::dot(is[r][t], w1[r], xb);
      }
    }
  }
}

// Adds sub-block dots `is` times their scales to the super-block's sum:
// fsb += is * (row r's 16 floats at dsc[r] + 16 * k) when expanded, else
// isb += is * int_scale(r) (16 int32).
template <bool kExpanded, int RG, int T, class IntScale>
inline void add_scaled(const VI (&is)[RG][T], const float* const* dsc, int64_t k, const IntScale& int_scale,
                       VI (&isb)[RG][T], VF (&fsb)[RG][T]) {
  for (int r = 0; r < RG; ++r) {
    if constexpr (kExpanded) {
      const VF sc = V::load_f(dsc[r] + 16 * k);
      for (int t = 0; t < T; ++t) fsb[r][t] = V::fmadd(V::cvt_i_f(is[r][t]), sc, fsb[r][t]);
    } else {
      const VI sc = int_scale(r);
      for (int t = 0; t < T; ++t) isb[r][t] = V::add_i32(isb[r][t], V::mullo_i32(is[r][t], sc));
    }
  }
}

// acc += the super-block's sum times token t's scale xd[t][b] (expanded:
// d * sc already in fsb), or times row r's f16 d at d_at(r) as well.
template <bool kExpanded, int RG, int T, class DAt>
inline void add_super_block(const VI (&isb)[RG][T], const VF (&fsb)[RG][T], const float* const* xd, int64_t b,
                            const DAt& d_at, VF (&acc)[RG][T]) {
  if constexpr (kExpanded) {
    for (int t = 0; t < T; ++t) {
      const VF dx = V::set1_f(xd[t][b]);
      for (int r = 0; r < RG; ++r) acc[r][t] = V::fmadd(fsb[r][t], dx, acc[r][t]);
    }
  } else {
    for (int r = 0; r < RG; ++r) {
      const VF dv = V::load_f16(d_at(r));
      for (int t = 0; t < T; ++t)
        acc[r][t] = V::fmadd(V::cvt_i_f(isb[r][t]), V::mul(dv, V::set1_f(xd[t][b])), acc[r][t]);
    }
  }
}

// Q4_K: each 32-element sub-block is a Q4_0-style block (integer sum from
// zero), scaled by d * sc[j] * dx; the mins term -dmin * dx * sum_j m[j] *
// sum(x of sub-block j) goes through vpdpwssd on (m[2p], m[2p+1]) pairs.
// P: the sub-blocks' quant layout (PQ4_0, PQ5_0 for Q5_K). kExpanded:
// prefill over XK45<P>'s copy (the quants as PX<P>, the metadata, then each
// sub-block's d * sc as 16 floats): sub-blocks summed in float (a convert
// and an FMA instead of vpmulld, 2 µops on port 0, and an add).
template <class P>
struct PX;
template <class P0, bool kExpanded, int RG, int T>
void tile_k45(const MatmulArgs& a, int64_t g, int64_t t0) {
  using P = std::conditional_t<kExpanded, PX<P0>, P0>;
  constexpr int kSub = P::kQBytes;
  const int64_t nsb = a.n_in / 256;
  const uint8_t* q[RG];
  const uint8_t* meta[RG];
  [[maybe_unused]] const float* dsc[RG];
  for (int r = 0; r < RG; ++r) {
    q[r] = a.wp + (g + r) * a.group_bytes;
    meta[r] = q[r] + nsb * 8 * kSub;
    dsc[r] = reinterpret_cast<const float*>(meta[r] + nsb * kPackQ4KMeta);
  }
  const KActs<T> acts(a, t0);
  const int8_t* const* x = acts.xq;
  const float* const* xd = acts.xd;
  const int16_t* const* bs = acts.bs;
  VF acc[RG][T];
  fill(acc, V::zero_f());
  for (int64_t b = 0; b < nsb; ++b) {
    // Integer sum over the super-block: each sub-block's exact dot times
    // its 6-bit scale (|sum| < 2^27), one float FMA per super-block
    // (expanded: the float sum of each sub-block's dot times d * sc).
    [[maybe_unused]] VI isb[RG][T];
    [[maybe_unused]] VF fsb[RG][T];
    if constexpr (kExpanded)
      fill(fsb, V::zero_f());
    else
      fill(isb, V::zero_i());
    for (int j = 0; j < 8; ++j) {
      if (T == 1 && !kExpanded && a.prefetch) {  // decode: prefetch the streams (kQuantPrefetch)
        for (int r = 0; r < RG; ++r) {
          for (int l = 0; l < kSub; l += 64) __builtin_prefetch(q[r] + (b * 8 + j) * kSub + kQuantPrefetch + l);
          if (j == 0)
            for (int l = 0; l < kPackQ4KMeta; l += 64) __builtin_prefetch(meta[r] + (b + 1) * kPackQ4KMeta + l);
        }
      }
      VI is[RG][T];
      fill(is, V::zero_i());
      sub_block_dot<P>(q, x, b, j, is);
      add_scaled<kExpanded>(
          is, dsc, 8 * b + j, [&](int r) { return V::u8x16_to_i32(meta[r] + b * kPackQ4KMeta + 64 + 16 * j); }, isb,
          fsb);
    }
    add_super_block<kExpanded>(
        isb, fsb, xd, b, [&](int r) { return meta[r] + b * kPackQ4KMeta; }, acc);
    VI ms[RG][T];
    fill(ms, V::zero_i());
    for (int p = 0; p < 4; ++p) {
      VI mv[RG];
      for (int r = 0; r < RG; ++r) mv[r] = V::u8x32_to_i16(meta[r] + b * kPackQ4KMeta + 192 + 32 * p);
      for (int t = 0; t < T; ++t) {
        const int16_t* s = bs[t] + 16 * b + 4 * p;
        const auto lo = static_cast<uint16_t>(s[0] + s[1]);
        const auto hi = static_cast<uint16_t>(s[2] + s[3]);
        const VI pair = V::set1_i32(static_cast<int32_t>(lo | (static_cast<uint32_t>(hi) << 16)));
        for (int r = 0; r < RG; ++r) ms[r][t] = V::dot_s16(ms[r][t], mv[r], pair);
      }
    }
    for (int r = 0; r < RG; ++r) {
      const VF dmin = V::load_f16(meta[r] + b * kPackQ4KMeta + 32);
      for (int t = 0; t < T; ++t)
        acc[r][t] = V::fnmadd(V::cvt_i_f(ms[r][t]), V::mul(dmin, V::set1_f(xd[t][b])), acc[r][t]);
    }
  }
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < RG; ++r) store_group(a, t0 + t, g + r, acc[r][t]);
}

// The 2-bit high parts of k-step i (0..3) moved to bits 4..5 of each byte.
template <int I>
inline VI q6_high(VI h) {
  const VI m = V::set1_i8(0x30);
  if constexpr (I == 0) return V::and_i(V::slli16(h, 4), m);
  if constexpr (I == 1) return V::and_i(V::slli16(h, 2), m);
  if constexpr (I == 2) return V::and_i(h, m);
  return V::and_i(V::srli16(h, 2), m);
}

// Q6_K: each 16-element half of a sub-block is 4 k-steps accumulated from
// -32 * sum(x) (the Q8_K block sums), then scaled by d * sc * dx.
// Q3_K (kSix false): the same without the high bits, from -4 * sum(x).
// kExpanded: the weights as one u8 each (XK16: k-step i of half h of
// sub-block j at 256 * (2 * (8 * b + j) + h) + 64 * i), the metadata, then
// each half's d * sc as 16 floats: halves are summed in float (a convert
// and an FMA instead of vpmulld, 2 µops on port 0, and an add).
template <bool kSix, bool kExpanded, int RG, int T>
void tile_k16(const MatmulArgs& a, int64_t g, int64_t t0) {
  constexpr int kOffset = kSix ? -32 : -4;
  const int64_t nsb = a.n_in / 256;
  const uint8_t* low[RG];
  const uint8_t* high[RG];
  const uint8_t* meta[RG];
  [[maybe_unused]] const float* dsc[RG];
  for (int r = 0; r < RG; ++r) {
    low[r] = a.wp + (g + r) * a.group_bytes;
    high[r] = low[r] + nsb * kPackQ6KLow;
    meta[r] = kExpanded ? low[r] + nsb * 4096 : high[r] + (kSix ? nsb * kPackQ6KHigh : 0);
    dsc[r] = reinterpret_cast<const float*>(meta[r] + nsb * kPackQ6KMeta);
  }
  const KActs<T> acts(a, t0);
  const int8_t* const* x = acts.xq;
  const float* const* xd = acts.xd;
  const int16_t* const* bs = acts.bs;
  const VI m4 = V::set1_i8(0x0F);
  VF acc[RG][T];
  fill(acc, V::zero_f());
  for (int64_t b = 0; b < nsb; ++b) {
    // Integer sum over the super-block: each 16-element half's exact dot
    // times its int8 scale (|sum| < 2^28), one float FMA per super-block
    // (expanded: the float sum of each half's dot times d * sc).
    [[maybe_unused]] VI isb[RG][T];
    [[maybe_unused]] VF fsb[RG][T];
    if constexpr (kExpanded)
      fill(fsb, V::zero_f());
    else
      fill(isb, V::zero_i());
    for (int j = 0; j < 8; ++j) {
      if (T == 1 && !kExpanded && a.prefetch) {  // decode: prefetch the streams (kQuantPrefetch)
        for (int r = 0; r < RG; ++r) {
          for (int l = 0; l < 256; l += 64) __builtin_prefetch(low[r] + b * kPackQ6KLow + j * 256 + kQuantPrefetch + l);
          if constexpr (kSix)
            for (int l = 0; l < 128; l += 64)
              __builtin_prefetch(high[r] + b * kPackQ6KHigh + j * 128 + kQuantPrefetch / 2 + l);
          if (j == 0)
            for (int l = 0; l < kPackQ6KMeta; l += 64) __builtin_prefetch(meta[r] + (b + 1) * kPackQ6KMeta + l);
        }
      }
      for (int half = 0; half < 2; ++half) {
        VI is[RG][T];
        for (int t = 0; t < T; ++t) {
          const VI init = V::set1_i32(kOffset * bs[t][16 * b + 2 * j + half]);
          for (int r = 0; r < RG; ++r) is[r][t] = init;
        }
        [[maybe_unused]] VI h[RG];
        if constexpr (kSix && !kExpanded)
          for (int r = 0; r < RG; ++r) h[r] = V::load_i(high[r] + b * kPackQ6KHigh + j * 128 + half * 64);
        auto step = [&](auto ic) {
          constexpr int i = decltype(ic)::value;
          VI w[RG];
          for (int r = 0; r < RG; ++r) {
            if constexpr (kExpanded) {
              w[r] = V::load_i(low[r] + 256 * (2 * (8 * b + j) + half) + 64 * i);
              continue;
            }
            const VI raw = V::load_i(low[r] + b * kPackQ6KLow + j * 256 + 64 * i);
            const VI nib = half == 0 ? V::and_i(raw, m4) : V::and_i(V::srli16(raw, 4), m4);
            if constexpr (kSix)
              w[r] = V::or_i(nib, q6_high<i>(h[r]));
            else
              w[r] = nib;
          }
          for (int t = 0; t < T; ++t) {
            const VI xv = bcast32(x[t] + 256 * b + 32 * j + 16 * half + 4 * i);
            for (int r = 0; r < RG; ++r) is[r][t] = V::dot_u8s8(is[r][t], w[r], xv);
          }
        };
        step(std::integral_constant<int, 0>{});
        step(std::integral_constant<int, 1>{});
        step(std::integral_constant<int, 2>{});
        step(std::integral_constant<int, 3>{});
        add_scaled<kExpanded>(
            is, dsc, 16 * b + 2 * j + half,
            [&](int r) { return V::i8x16_to_i32(meta[r] + b * kPackQ6KMeta + 16 * (2 * j + half)); }, isb, fsb);
      }
    }
    add_super_block<kExpanded>(
        isb, fsb, xd, b, [&](int r) { return meta[r] + b * kPackQ6KMeta + 256; }, acc);
  }
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < RG; ++r) store_group(a, t0 + t, g + r, acc[r][t]);
}

// IQ4_XS: each 32-element sub-block an IQ4_NL-style block from
// kQ8Offset * sum(x of the sub-block) (the Q8_K sums), times its signed
// scale, one float FMA per super-block. kExpanded: the quants as
// PX<PIQ4NL>, the metadata, then each sub-block's d * sc as 16 floats
// (XIQ4XS): sub-blocks summed in float (a convert and an FMA instead of
// vpmulld and an add).
template <bool kExpanded, int RG, int T>
void tile_iq4_xs(const MatmulArgs& a, int64_t g, int64_t t0) {
  using P = std::conditional_t<kExpanded, PX<PIQ4NL>, PIQ4NL>;
  const int64_t nsb = a.n_in / 256;
  const uint8_t* q[RG];
  const uint8_t* meta[RG];
  [[maybe_unused]] const float* dsc[RG];
  for (int r = 0; r < RG; ++r) {
    q[r] = a.wp + (g + r) * a.group_bytes;
    meta[r] = q[r] + nsb * 8 * P::kQBytes;
    dsc[r] = reinterpret_cast<const float*>(meta[r] + nsb * kPackIQ4XSMeta);
  }
  const KActs<T> acts(a, t0);
  const int8_t* const* x = acts.xq;
  const float* const* xd = acts.xd;
  const int16_t* const* bs = acts.bs;
  VF acc[RG][T];
  fill(acc, V::zero_f());
  for (int64_t b = 0; b < nsb; ++b) {
    [[maybe_unused]] VI isb[RG][T];
    [[maybe_unused]] VF fsb[RG][T];
    if constexpr (kExpanded)
      fill(fsb, V::zero_f());
    else
      fill(isb, V::zero_i());
    for (int j = 0; j < 8; ++j) {
      VI is[RG][T];
      for (int t = 0; t < T; ++t) {
        const VI init = V::set1_i32(P::kOffset * (bs[t][16 * b + 2 * j] + bs[t][16 * b + 2 * j + 1]));
        for (int r = 0; r < RG; ++r) is[r][t] = init;
      }
      sub_block_dot<P>(q, x, b, j, is);
      add_scaled<kExpanded>(
          is, dsc, 8 * b + j, [&](int r) { return V::i8x16_to_i32(meta[r] + b * kPackIQ4XSMeta + 32 + 16 * j); }, isb,
          fsb);
    }
    add_super_block<kExpanded>(
        isb, fsb, xd, b, [&](int r) { return meta[r] + b * kPackIQ4XSMeta; }, acc);
  }
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < RG; ++r) store_group(a, t0 + t, g + r, acc[r][t]);
}

// Q2_K: each 16-element sub-block is one 64-byte vector (4 k-steps of 2-bit
// values, k-step i in bits 2i..2i+1), an exact integer dot from zero times
// its 4-bit scale; the mins term -dmin * dx * sum_k m[k] * sum(x of
// sub-block k) through vpdpwssd on (m[2p], m[2p+1]) pairs, as Q4_K's.
template <int RG, int T>
void tile_q2_k(const MatmulArgs& a, int64_t g, int64_t t0) {
  const int64_t nsb = a.n_in / 256;
  const uint8_t* q[RG];
  const uint8_t* meta[RG];
  for (int r = 0; r < RG; ++r) {
    q[r] = a.wp + (g + r) * a.group_bytes;
    meta[r] = q[r] + nsb * kPackQ2KQuants;
  }
  const KActs<T> acts(a, t0);
  const int8_t* const* x = acts.xq;
  const float* const* xd = acts.xd;
  const int16_t* const* bs = acts.bs;
  const VI m2 = V::set1_i8(0x03);
  VF acc[RG][T];
  fill(acc, V::zero_f());
  for (int64_t b = 0; b < nsb; ++b) {
    // |sum| < 16 sub-blocks x 15 x 16 x 3 x 127 < 2^21.
    VI isb[RG][T];
    fill(isb, V::zero_i());
    for (int j = 0; j < 16; ++j) {
      VI raw[RG];
      for (int r = 0; r < RG; ++r) raw[r] = V::load_i(q[r] + (b * 16 + j) * 64);
      VI is[RG][T];
      fill(is, V::zero_i());
      auto step = [&](auto ic) {
        constexpr int i = decltype(ic)::value;
        VI w[RG];
        for (int r = 0; r < RG; ++r) w[r] = V::and_i(i == 0 ? raw[r] : V::srli16(raw[r], 2 * i), m2);
        for (int t = 0; t < T; ++t) {
          const VI xv = bcast32(x[t] + 256 * b + 16 * j + 4 * i);
          for (int r = 0; r < RG; ++r) is[r][t] = V::dot_u8s8(is[r][t], w[r], xv);
        }
      };
      step(std::integral_constant<int, 0>{});
      step(std::integral_constant<int, 1>{});
      step(std::integral_constant<int, 2>{});
      step(std::integral_constant<int, 3>{});
      for (int r = 0; r < RG; ++r) {
        const VI sc = V::u8x16_to_i32(meta[r] + b * kPackQ2KMeta + 64 + 16 * j);
        for (int t = 0; t < T; ++t) isb[r][t] = V::add_i32(isb[r][t], V::mullo_i32(is[r][t], sc));
      }
    }
    for (int r = 0; r < RG; ++r) {
      const VF dv = V::load_f16(meta[r] + b * kPackQ2KMeta);
      for (int t = 0; t < T; ++t)
        acc[r][t] = V::fmadd(V::cvt_i_f(isb[r][t]), V::mul(dv, V::set1_f(xd[t][b])), acc[r][t]);
    }
    VI ms[RG][T];
    fill(ms, V::zero_i());
    for (int p = 0; p < 8; ++p) {
      VI mv[RG];
      for (int r = 0; r < RG; ++r) mv[r] = V::u8x32_to_i16(meta[r] + b * kPackQ2KMeta + 320 + 32 * p);
      for (int t = 0; t < T; ++t) {
        const int16_t* s = bs[t] + 16 * b + 2 * p;
        const auto lo = static_cast<uint16_t>(s[0]);
        const auto hi = static_cast<uint16_t>(s[1]);
        const VI pair = V::set1_i32(static_cast<int32_t>(lo | (static_cast<uint32_t>(hi) << 16)));
        for (int r = 0; r < RG; ++r) ms[r][t] = V::dot_s16(ms[r][t], mv[r], pair);
      }
    }
    for (int r = 0; r < RG; ++r) {
      const VF dmin = V::load_f16(meta[r] + b * kPackQ2KMeta + 32);
      for (int t = 0; t < T; ++t)
        acc[r][t] = V::fnmadd(V::cvt_i_f(ms[r][t]), V::mul(dmin, V::set1_f(xd[t][b])), acc[r][t]);
    }
  }
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < RG; ++r) store_group(a, t0 + t, g + r, acc[r][t]);
}

struct LdF32 {
  static constexpr int kBytes = 4;
  static VF load(const uint8_t* p) { return V::load_f(reinterpret_cast<const float*>(p)); }
};
struct LdF16 {
  static constexpr int kBytes = 2;
  static VF load(const uint8_t* p) { return V::load_f16(p); }
};
struct LdBF16 {
  static constexpr int kBytes = 2;
  static VF load(const uint8_t* p) { return V::load_bf16(p); }
};

template <class L, int RG, int T>
void tile_f(const MatmulArgs& a, int64_t g, int64_t t0) {
  const uint8_t* w[RG];
  for (int r = 0; r < RG; ++r) w[r] = a.wp + (g + r) * a.group_bytes;
  const float* x[T];
  for (int t = 0; t < T; ++t) x[t] = a.x + (t0 + t) * a.x_stride;
  VF acc[RG][T];
  fill(acc, V::zero_f());
  const int64_t n = a.n_in;
  for (int64_t k = 0; k < n; ++k) {
    if (T == 1 && a.prefetch) {
      // Decode: RG streams, each prefetched kFloatPrefetch bytes ahead once
      // per cache line (the hardware streamer restarts at 4 KiB pages).
      constexpr int64_t kPerLine = 64 / (16 * L::kBytes);
      if (k % kPerLine == 0)
        for (int r = 0; r < RG; ++r) __builtin_prefetch(w[r] + k * 16 * L::kBytes + kFloatPrefetch);
    }
    VF wv[RG];
    for (int r = 0; r < RG; ++r) wv[r] = L::load(w[r] + k * 16 * L::kBytes);
    for (int t = 0; t < T; ++t) {
      const VF xb = V::set1_f(x[t][k]);
      for (int r = 0; r < RG; ++r) acc[r][t] = V::fmadd(wv[r], xb, acc[r][t]);
    }
  }
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < RG; ++r) store_group(a, t0 + t, g + r, acc[r][t]);
}

using GroupTile = void (*)(const MatmulArgs&, int64_t g, int64_t t0);

// Tiles [G groups][1..T tokens] by token count.
template <template <int, int> class K, int G, int T>
struct TileRow {
  template <size_t... I>
  static constexpr auto make(std::index_sequence<I...>) {
    return std::array<GroupTile, T>{&K<G, static_cast<int>(I) + 1>::run...};
  }
  static constexpr auto tiles = make(std::make_index_sequence<T>{});
};

// Tiles of RG groups, of 2 (RG == 3 only) and of 1, by token count.
template <template <int, int> class K, int RG, int T>
struct TileSet {
  static constexpr auto full = TileRow<K, RG, T>::tiles;
  static constexpr auto pair = TileRow<K, (RG == 3 ? 2 : RG), T>::tiles;
  static constexpr auto single = TileRow<K, 1, T>::tiles;
};

// Groups [g, ge) of one token tile: RG-group tiles; with RG == 3 the rest
// (and a remainder of 4) in pairs, so a single group runs alone only when
// the range is one group: a 1-group tile has one weight vector per
// broadcast input and ran at half the rate of the 3-group one.
template <class Set, int RG>
void sweep_groups(const MatmulArgs& a, int64_t g, int64_t ge, int nt, int64_t t) {
  if constexpr (RG == 3) {
    for (; ge - g >= 3 && ge - g != 4; g += 3) Set::full[nt - 1](a, g, t);
    for (; ge - g >= 2; g += 2) Set::pair[nt - 1](a, g, t);
  } else {
    for (; g + RG <= ge; g += RG) Set::full[nt - 1](a, g, t);
  }
  for (; g < ge; ++g) Set::single[nt - 1](a, g, t);
}

// Rows [r0, r1): r0 a multiple of 16, r1 too or n_out (the last group's
// padding rows are computed, not stored). Decode: RGd groups at a time
// (independent accumulation chains). Prefill: a chunk of groups sized to
// stay in L2 (kPackChunkBytes) is swept by every tile of T tokens.
template <template <int, int> class K, int RG, int T, int RGd>
void packed_rows(const MatmulArgs& a, int64_t r0, int64_t r1) {
  const int64_t g0 = r0 / kPackRows, g1 = (r1 + kPackRows - 1) / kPackRows;
  if (a.n_tokens == 1) {
    int64_t g = g0;
    for (; g + RGd <= g1; g += RGd) K<RGd, 1>::run(a, g, 0);
    for (; g < g1; ++g) K<1, 1>::run(a, g, 0);
    return;
  }
  using Set = TileSet<K, RG, T>;
  const int64_t chunk = std::max<int64_t>(RG, kPackChunkBytes / static_cast<int64_t>(a.group_bytes) / RG * RG);
  for (int64_t gc = g0; gc < g1; gc += chunk) {
    const int64_t ge = std::min(g1, gc + chunk);
    for (int64_t t = 0; t < a.n_tokens; t += T)
      sweep_groups<Set, RG>(a, gc, ge, static_cast<int>(std::min<int64_t>(T, a.n_tokens - t)), t);
  }
}

// Registers packed_rows<K, RG, T, RGd> for `kind` with its tile shape.
template <template <int, int> class K, int RG, int T, int RGd>
void set_packed(IsaKernels& k, WKind kind) {
  k.packed[static_cast<int>(kind)] = packed_rows<K, RG, T, RGd>;
  k.packed_tile_groups[static_cast<int>(kind)][0] = RG;
  k.packed_tile_groups[static_cast<int>(kind)][1] = RGd;
}

// Prefill of the nibble formats (P = PQ4_0, PQ4_1, PQ5_0, PQ5_1, PIQ4NL,
// and the sub-blocks of Q4_K / Q5_K) through an expanded copy: unpacking
// nibbles inside the tile costs 3-5 port-0/5 µops per weight vector for
// every T tokens (the 3 x 3 Q4_0 tile spends 36 of its ~144 such µops per
// block there, vs 72 vpdpbusd), so a chunk of groups is first expanded,
// once for all the tokens, to one u8 per weight in Q8_0's vector order
// (PX<P>: vector v holds elements 4v..4v+3 of the 16 rows; the group's
// scales, mins and other metadata follow unchanged), and swept with a
// tile that reads PX<P>: the same integer block dots, so the results are
// those of the direct tile.
template <class P>
struct PX {
  static constexpr int kQBytes = 512;
  static constexpr int kOffset = P::kOffset;
  static constexpr bool kMin = P::kMin;
  static void step(const uint8_t* q, int i, VI& w0, VI& w1) { PQ8_0::step(q, i, w0, w1); }
  static constexpr int off0(int i) { return PQ8_0::off0(i); }
  static constexpr int off1(int i) { return PQ8_0::off1(i); }
  static VI dot(VI acc, VI w, VI x) { return P::dot(acc, w, x); }
  // The expander interface of packed_rows_expanded: a group's quant bytes
  // in the packed copy and expanded, and the expansion of the quants.
  static int64_t src_quant_bytes(int64_t n_in) { return n_in / 32 * P::kQBytes; }
  static int64_t quant_bytes(int64_t n_in) { return n_in / 32 * kQBytes; }
  static int64_t extra_bytes(int64_t) { return 0; }  // after the metadata
  static void expand_extra(const uint8_t*, int64_t, uint8_t*) {}
  static void expand(const uint8_t* q, int64_t n_in, uint8_t* out) {
    for (int64_t b = 0; b < n_in / 32; ++b)
      for (int i = 0; i < 4; ++i) {
        VI w0, w1;
        P::step(q + b * P::kQBytes, i, w0, w1);
        V::store_i(out + b * kQBytes + 16 * P::off0(i), w0);
        V::store_i(out + b * kQBytes + 16 * P::off1(i), w1);
      }
  }
};

// The expander for Q6_K / Q3_K (tile_k16<kSix, true>): each k-step vector
// of a 16-element half, as the direct tile builds it.
template <bool kSix>
struct XK16 {
  static int64_t src_quant_bytes(int64_t n_in) { return n_in / 256 * (kPackQ6KLow + (kSix ? kPackQ6KHigh : 0)); }
  static int64_t quant_bytes(int64_t n_in) { return n_in / 256 * 4096; }
  // Each half's d * sc (exact: an f16 times an int8).
  static int64_t extra_bytes(int64_t n_in) { return n_in / 256 * 1024; }
  static void expand_extra(const uint8_t* meta, int64_t n_in, uint8_t* out) {
    auto* f = reinterpret_cast<float*>(out);
    for (int64_t b = 0; b < n_in / 256; ++b) {
      const uint8_t* m = meta + b * kPackQ6KMeta;
      const VF d = V::load_f16(m + 256);
      for (int k = 0; k < 16; ++k)
        V::store_f(f + 16 * (16 * b + k), V::mul(d, V::cvt_i_f(V::i8x16_to_i32(m + 16 * k))));
    }
  }
  template <int I>
  static void half(const uint8_t* low, const uint8_t* high, int half, uint8_t* out) {
    const VI m4 = V::set1_i8(0x0F);
    const VI raw = V::load_i(low + 64 * I);
    VI w = half == 0 ? V::and_i(raw, m4) : V::and_i(V::srli16(raw, 4), m4);
    if constexpr (kSix) w = V::or_i(w, q6_high<I>(V::load_i(high + half * 64)));
    V::store_i(out + 64 * I, w);
  }
  static void expand(const uint8_t* q, int64_t n_in, uint8_t* out) {
    const int64_t nsb = n_in / 256;
    for (int64_t b = 0; b < nsb; ++b)
      for (int j = 0; j < 8; ++j)
        for (int h = 0; h < 2; ++h) {
          const uint8_t* low = q + b * kPackQ6KLow + j * 256;
          const uint8_t* high = q + nsb * kPackQ6KLow + b * kPackQ6KHigh + j * 128;
          uint8_t* o = out + 256 * (2 * (8 * b + j) + h);
          half<0>(low, high, h, o);
          half<1>(low, high, h, o);
          half<2>(low, high, h, o);
          half<3>(low, high, h, o);
        }
  }
};

// The tiles over expanded copies: 32-blocks (tile_q) and Q4_K / Q5_K.
template <class P>
struct KXQ {
  template <int RG, int T>
  struct K {
    static void run(const MatmulArgs& a, int64_t g, int64_t t) { tile_q<PX<P>, RG, T>(a, g, t); }
  };
};
// Q4_K / Q5_K expanded (P = PQ4_0 / PQ5_0): PX<P>'s quants and the
// metadata, then each sub-block's scale times d as 16 floats (exact: an
// f16 times a 6-bit integer), so tile_k45<P, true> scales a sub-block's dot with
// one convert and one FMA (vpmulld, 2 µops on port 0, and an add before).
template <class P>
struct XK45 : PX<P> {
  static int64_t extra_bytes(int64_t n_in) { return n_in / 32 * 64; }
  static void expand_extra(const uint8_t* meta, int64_t n_in, uint8_t* out) {
    auto* f = reinterpret_cast<float*>(out);
    for (int64_t b = 0; b < n_in / 256; ++b) {
      const uint8_t* m = meta + b * kPackQ4KMeta;
      const VF d = V::load_f16(m);
      for (int j = 0; j < 8; ++j)
        V::store_f(f + 16 * (8 * b + j), V::mul(d, V::cvt_i_f(V::u8x16_to_i32(m + 64 + 16 * j))));
    }
  }
};

template <class P>
struct KXK45 {
  template <int RG, int T>
  struct K {
    static void run(const MatmulArgs& a, int64_t g, int64_t t) { tile_k45<P, true, RG, T>(a, g, t); }
  };
};
// IQ4_XS expanded: PX<PIQ4NL>'s quants, the metadata, then each
// sub-block's d * sc (exact: an f16 times a 6-bit signed integer).
struct XIQ4XS : PX<PIQ4NL> {
  static int64_t extra_bytes(int64_t n_in) { return n_in / 32 * 64; }
  static void expand_extra(const uint8_t* meta, int64_t n_in, uint8_t* out) {
    auto* f = reinterpret_cast<float*>(out);
    for (int64_t b = 0; b < n_in / 256; ++b) {
      const uint8_t* m = meta + b * kPackIQ4XSMeta;
      const VF d = V::load_f16(m);
      for (int j = 0; j < 8; ++j)
        V::store_f(f + 16 * (8 * b + j), V::mul(d, V::cvt_i_f(V::i8x16_to_i32(m + 32 + 16 * j))));
    }
  }
};
template <int RG, int T>
struct KXIQ4XS {
  static void run(const MatmulArgs& a, int64_t g, int64_t t) { tile_iq4_xs<true, RG, T>(a, g, t); }
};

template <bool kSix>
struct KXK16 {
  template <int RG, int T>
  struct K {
    static void run(const MatmulArgs& a, int64_t g, int64_t t) { tile_k16<kSix, true, RG, T>(a, g, t); }
  };
};

// Token counts from which the expanded copy pays (a group's expansion
// costs about what 8 tokens save).
constexpr int64_t kExpandMinTokens = 16;

// This thread's expansion buffer (64-byte aligned, grown on demand, kept);
// nullptr if it cannot be allocated (the caller takes the direct path).
inline uint8_t* expand_buffer(int64_t bytes) {
  struct Buffer {
    uint8_t* p = nullptr;
    int64_t n = 0;
    ~Buffer() { std::free(p); }
  };
  thread_local Buffer buf;
  if (buf.n < bytes) {
    std::free(buf.p);
    const int64_t n = (bytes + 63) / 64 * 64;
    buf.p = static_cast<uint8_t*>(std::aligned_alloc(64, static_cast<size_t>(n)));
    buf.n = buf.p != nullptr ? n : 0;
  }
  return buf.p;
}

// packed_rows<K, RG, T, RGd> below kExpandMinTokens; from there, chunks
// of groups expanded (E: PX<P> or XK16) and swept by XRG x XT tiles of KX.
template <template <int, int> class K, template <int, int> class KX, class E, int RG, int T, int RGd, int XRG, int XT>
void packed_rows_expanded(const MatmulArgs& a, int64_t r0, int64_t r1) {
  const int64_t g0 = r0 / kPackRows, g1 = (r1 + kPackRows - 1) / kPackRows;
  const int64_t src_q = E::src_quant_bytes(a.n_in), xq = E::quant_bytes(a.n_in);
  const int64_t meta = static_cast<int64_t>(a.group_bytes) - src_q;
  const int64_t xbytes = xq + meta + E::extra_bytes(a.n_in);
  const int64_t chunk = std::min(g1 - g0, std::max<int64_t>(XRG, kPackChunkBytes / xbytes / XRG * XRG));
  uint8_t* buf = a.n_tokens >= kExpandMinTokens ? expand_buffer(chunk * xbytes) : nullptr;
  if (buf == nullptr) {
    packed_rows<K, RG, T, RGd>(a, r0, r1);
    return;
  }
  using Set = TileSet<KX, XRG, XT>;
  MatmulArgs x = a;
  x.wp = buf;
  x.group_bytes = static_cast<size_t>(xbytes);
  for (int64_t gc = g0; gc < g1; gc += chunk) {
    const int64_t n = std::min(g1, gc + chunk) - gc;
    for (int64_t g = 0; g < n; ++g) {
      const uint8_t* src = a.wp + (gc + g) * a.group_bytes;
      E::expand(src, a.n_in, buf + g * xbytes);
      std::memcpy(buf + g * xbytes + xq, src + src_q, static_cast<size_t>(meta));
      E::expand_extra(src + src_q, a.n_in, buf + g * xbytes + xq + meta);
    }
    x.y = a.y + kPackRows * gc;  // the tiles see group gc as group 0
    x.n_out = a.n_out - kPackRows * gc;
    for (int64_t t = 0; t < a.n_tokens; t += XT) {
      sweep_groups<Set, XRG>(x, 0, n, static_cast<int>(std::min<int64_t>(XT, a.n_tokens - t)), t);
    }
  }
}

// Registers packed_rows_expanded for `kind`: prefill work is cut in whole
// XRG-group tiles, decode in RGd groups.
template <template <int, int> class K, template <int, int> class KX, class E, int RG, int T, int RGd, int XRG, int XT>
void set_packed_expanded(IsaKernels& k, WKind kind) {
  k.packed[static_cast<int>(kind)] = packed_rows_expanded<K, KX, E, RG, T, RGd, XRG, XT>;
  k.packed_tile_groups[static_cast<int>(kind)][0] = XRG;
  k.packed_tile_groups[static_cast<int>(kind)][1] = RGd;
}

// Rows by one of two registered kernels, whichever cpu::int8_tiles()
// names now (A: 2 x 6, B: 3 x 4).
template <RowsFn A, RowsFn B>
void rows_by_int8_tiles(const MatmulArgs& a, int64_t r0, int64_t r1) {
  (int8_tiles() == Int8Tiles::k3x4 ? B : A)(a, r0, r1);
}

template <int RG, int T>
struct KQ4_0 {
  static void run(const MatmulArgs& a, int64_t g, int64_t t) { tile_q<PQ4_0, RG, T>(a, g, t); }
};
template <int RG, int T>
struct KQ8_0 {
  static void run(const MatmulArgs& a, int64_t g, int64_t t) { tile_q<PQ8_0, RG, T>(a, g, t); }
};
template <int RG, int T>
struct KQ8_0R {
  static void run(const MatmulArgs& a, int64_t g, int64_t t) { tile_q8_0r<RG, T>(a, g, t); }
};
template <int RG, int T>
struct KQ4_1 {
  static void run(const MatmulArgs& a, int64_t g, int64_t t) { tile_q<PQ4_1, RG, T>(a, g, t); }
};
template <int RG, int T>
struct KQ5_0 {
  static void run(const MatmulArgs& a, int64_t g, int64_t t) { tile_q<PQ5_0, RG, T>(a, g, t); }
};
template <int RG, int T>
struct KQ5_1 {
  static void run(const MatmulArgs& a, int64_t g, int64_t t) { tile_q<PQ5_1, RG, T>(a, g, t); }
};
template <int RG, int T>
struct KQ4_K {
  static void run(const MatmulArgs& a, int64_t g, int64_t t) { tile_k45<PQ4_0, false, RG, T>(a, g, t); }
};
template <int RG, int T>
struct KQ5_K {
  static void run(const MatmulArgs& a, int64_t g, int64_t t) { tile_k45<PQ5_0, false, RG, T>(a, g, t); }
};
template <int RG, int T>
struct KQ6_K {
  static void run(const MatmulArgs& a, int64_t g, int64_t t) { tile_k16<true, false, RG, T>(a, g, t); }
};
template <int RG, int T>
struct KQ3_K {
  static void run(const MatmulArgs& a, int64_t g, int64_t t) { tile_k16<false, false, RG, T>(a, g, t); }
};
template <int RG, int T>
struct KIQ4_NL {
  static void run(const MatmulArgs& a, int64_t g, int64_t t) { tile_q<PIQ4NL, RG, T>(a, g, t); }
};
template <int RG, int T>
struct KIQ4_XS {
  static void run(const MatmulArgs& a, int64_t g, int64_t t) { tile_iq4_xs<false, RG, T>(a, g, t); }
};
template <int RG, int T>
struct KQ2_K {
  static void run(const MatmulArgs& a, int64_t g, int64_t t) { tile_q2_k<RG, T>(a, g, t); }
};
template <int RG, int T>
struct KF32 {
  static void run(const MatmulArgs& a, int64_t g, int64_t t) { tile_f<LdF32, RG, T>(a, g, t); }
};
template <int RG, int T>
struct KF16 {
  static void run(const MatmulArgs& a, int64_t g, int64_t t) { tile_f<LdF16, RG, T>(a, g, t); }
};
template <int RG, int T>
struct KBF16 {
  static void run(const MatmulArgs& a, int64_t g, int64_t t) { tile_f<LdBF16, RG, T>(a, g, t); }
};
