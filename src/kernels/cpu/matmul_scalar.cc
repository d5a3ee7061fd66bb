// Portable scalar matmul kernels. For the quantized types this is the
// integer reference of the exact algorithm the SIMD paths use (activations
// in 8-bit blocks, integer block dots, the same float scaling), so the SIMD
// paths can be checked against it to near bit-exactness.
#include <cstring>
#include <type_traits>

#include "core/fp16.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/register.h"
#include "kernels/ref/blocks.h"

namespace pagoda::kernels::cpu {
namespace {

using namespace pagoda::ref;

// Legacy 32-blocks as w = dw * q + cw with integer q.
struct Ints32 {
  int q[32];
  float dw, cw;
};

void unpack_nibbles(const uint8_t* qs, int* q) {
  for (int j = 0; j < 16; ++j) {
    q[j] = qs[j] & 0xF;
    q[j + 16] = qs[j] >> 4;
  }
}

void add_high_bit(const uint8_t* qh_bytes, int* q) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  for (int j = 0; j < 32; ++j) q[j] |= static_cast<int>((qh >> j) & 1u) << 4;
}

void to_ints(const BlockQ8_0& b, Ints32* o) {
  for (int j = 0; j < 32; ++j) o->q[j] = b.qs[j];
  o->dw = fp16_to_fp32(b.d);
  o->cw = 0;
}
void to_ints(const BlockQ4_0& b, Ints32* o) {
  unpack_nibbles(b.qs, o->q);
  o->dw = fp16_to_fp32(b.d);
  o->cw = -8 * o->dw;
}
void to_ints(const BlockQ4_1& b, Ints32* o) {
  unpack_nibbles(b.qs, o->q);
  o->dw = fp16_to_fp32(b.d);
  o->cw = fp16_to_fp32(b.m);
}
void to_ints(const BlockQ5_0& b, Ints32* o) {
  unpack_nibbles(b.qs, o->q);
  add_high_bit(b.qh, o->q);
  o->dw = fp16_to_fp32(b.d);
  o->cw = -16 * o->dw;
}
void to_ints(const BlockQ5_1& b, Ints32* o) {
  unpack_nibbles(b.qs, o->q);
  add_high_bit(b.qh, o->q);
  o->dw = fp16_to_fp32(b.d);
  o->cw = fp16_to_fp32(b.m);
}

template <class Block>
float dot_legacy(const uint8_t* row, const MatmulArgs& a, int64_t t) {
  const int64_t nb = a.n_in / 32;
  const int8_t* xq = a.act.qs + t * a.n_in;
  const float* xd = a.act.d + t * nb;
  const float* xs = a.act.s + t * nb;
  float sum = 0;
  for (int64_t b = 0; b < nb; ++b) {
    Block blk;
    std::memcpy(&blk, row + b * sizeof(Block), sizeof(Block));
    Ints32 w;
    to_ints(blk, &w);
    int dot = 0;
    for (int j = 0; j < 32; ++j) dot += w.q[j] * xq[b * 32 + j];
    sum += w.dw * xd[b] * static_cast<float>(dot) + w.cw * xs[b];
  }
  return sum;
}

// W8A8: every block of the row has the row's scale (block 0's); the
// activations have one scale per token. The whole row is one integer dot.
float dot_q8_0r(const uint8_t* row, const MatmulArgs& a, int64_t t) {
  const int64_t nb = a.n_in / 32;
  const int8_t* xq = a.act.qs + t * a.n_in;
  int64_t dot = 0;
  for (int64_t b = 0; b < nb; ++b) {
    BlockQ8_0 blk;
    std::memcpy(&blk, row + b * sizeof(BlockQ8_0), sizeof(BlockQ8_0));
    for (int j = 0; j < 32; ++j) dot += blk.qs[j] * xq[b * 32 + j];
  }
  uint16_t d;
  std::memcpy(&d, row, 2);
  return fp16_to_fp32(d) * a.act.d[t] * static_cast<float>(dot);
}

// K-quants: integer q per element and integer sub-block scales.
void k4_ints(const BlockQ4_K& b, int* q) {
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      q[64 * c + l] = b.qs[32 * c + l] & 0xF;
      q[64 * c + l + 32] = b.qs[32 * c + l] >> 4;
    }
}
void k5_ints(const BlockQ5_K& b, int* q) {
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      q[64 * c + l] = (b.qs[32 * c + l] & 0xF) | (((b.qh[l] >> (2 * c)) & 1) << 4);
      q[64 * c + l + 32] = (b.qs[32 * c + l] >> 4) | (((b.qh[l] >> (2 * c + 1)) & 1) << 4);
    }
}

template <class Block>
float dot_k45(const uint8_t* row, const MatmulArgs& a, int64_t t) {
  const int64_t nb = a.n_in / kQK_K;
  const int8_t* xq = a.act.qs + t * a.n_in;
  const float* xd = a.act.d + t * nb;
  const int16_t* bs = a.act.bsums + t * (a.n_in / kActSumGroup);
  float sum = 0;
  for (int64_t b = 0; b < nb; ++b) {
    Block blk;
    std::memcpy(&blk, row + b * sizeof(Block), sizeof(Block));
    int q[kQK_K];
    if constexpr (std::is_same_v<Block, BlockQ4_K>)
      k4_ints(blk, q);
    else
      k5_ints(blk, q);
    int sumi = 0, summ = 0;
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      get_scale_min_k4(j, blk.scales, &sc, &m);
      int dot = 0;
      for (int l = 0; l < 32; ++l) dot += q[32 * j + l] * xq[b * kQK_K + 32 * j + l];
      sumi += sc * dot;
      summ += m * (bs[b * 16 + 2 * j] + bs[b * 16 + 2 * j + 1]);
    }
    sum += fp16_to_fp32(blk.d) * xd[b] * static_cast<float>(sumi) -
           fp16_to_fp32(blk.dmin) * xd[b] * static_cast<float>(summ);
  }
  return sum;
}

float dot_q6_k(const uint8_t* row, const MatmulArgs& a, int64_t t) {
  const int64_t nb = a.n_in / kQK_K;
  const int8_t* xq = a.act.qs + t * a.n_in;
  const float* xd = a.act.d + t * nb;
  const int16_t* bs = a.act.bsums + t * (a.n_in / kActSumGroup);
  float sum = 0;
  for (int64_t b = 0; b < nb; ++b) {
    BlockQ6_K blk;
    std::memcpy(&blk, row + b * sizeof(BlockQ6_K), sizeof(BlockQ6_K));
    int q[kQK_K];
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = blk.ql + 64 * h;
      const uint8_t* qh = blk.qh + 32 * h;
      int* o = q + 128 * h;
      for (int l = 0; l < 32; ++l) {
        o[l] = (ql[l] & 0xF) | ((qh[l] & 3) << 4);
        o[l + 32] = (ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4);
        o[l + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
        o[l + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
      }
    }
    int sumi = 0;
    for (int j = 0; j < 16; ++j) {
      int dot = 0;
      for (int l = 0; l < 16; ++l) dot += q[16 * j + l] * xq[b * kQK_K + 16 * j + l];
      sumi += blk.scales[j] * (dot - 32 * bs[b * 16 + j]);
    }
    sum += fp16_to_fp32(blk.d) * xd[b] * static_cast<float>(sumi);
  }
  return sum;
}

float dot_q2_k(const uint8_t* row, const MatmulArgs& a, int64_t t) {
  const int64_t nb = a.n_in / kQK_K;
  const int8_t* xq = a.act.qs + t * a.n_in;
  const float* xd = a.act.d + t * nb;
  const int16_t* bs = a.act.bsums + t * (a.n_in / kActSumGroup);
  float sum = 0;
  for (int64_t b = 0; b < nb; ++b) {
    BlockQ2_K blk;
    std::memcpy(&blk, row + b * sizeof(BlockQ2_K), sizeof(BlockQ2_K));
    int sumi = 0, summ = 0;
    for (int k = 0; k < 16; ++k) {
      int dot = 0;
      for (int l = 0; l < 16; ++l) {
        const int e = 16 * k + l;
        dot += k_quant_2bits(blk.qs, e) * xq[b * kQK_K + e];
      }
      sumi += (blk.scales[k] & 0xF) * dot;
      summ += (blk.scales[k] >> 4) * bs[b * 16 + k];
    }
    sum += fp16_to_fp32(blk.d) * xd[b] * static_cast<float>(sumi) -
           fp16_to_fp32(blk.dmin) * xd[b] * static_cast<float>(summ);
  }
  return sum;
}

float dot_q3_k(const uint8_t* row, const MatmulArgs& a, int64_t t) {
  const int64_t nb = a.n_in / kQK_K;
  const int8_t* xq = a.act.qs + t * a.n_in;
  const float* xd = a.act.d + t * nb;
  const int16_t* bs = a.act.bsums + t * (a.n_in / kActSumGroup);
  float sum = 0;
  for (int64_t b = 0; b < nb; ++b) {
    BlockQ3_K blk;
    std::memcpy(&blk, row + b * sizeof(BlockQ3_K), sizeof(BlockQ3_K));
    int8_t sc[16];
    get_scales_q3_k(blk, sc);
    int sumi = 0;
    for (int k = 0; k < 16; ++k) {
      int dot = 0;
      for (int l = 0; l < 16; ++l) {
        const int e = 16 * k + l;
        const int low = k_quant_2bits(blk.qs, e);
        const int high = (blk.hmask[e % 32] >> (e / 32)) & 1;
        dot += (low + 4 * high) * xq[b * kQK_K + e];
      }
      sumi += sc[k] * (dot - 4 * bs[b * 16 + k]);
    }
    sum += fp16_to_fp32(blk.d) * xd[b] * static_cast<float>(sumi);
  }
  return sum;
}

float dot_iq4_nl(const uint8_t* row, const MatmulArgs& a, int64_t t) {
  const int64_t nb = a.n_in / 32;
  const int8_t* xq = a.act.qs + t * a.n_in;
  const float* xd = a.act.d + t * nb;
  float sum = 0;
  for (int64_t b = 0; b < nb; ++b) {
    BlockIQ4_NL blk;
    std::memcpy(&blk, row + b * sizeof(BlockIQ4_NL), sizeof(BlockIQ4_NL));
    int dot = 0;
    for (int j = 0; j < 16; ++j)
      dot += kIq4nlValues[blk.qs[j] & 0xF] * xq[b * 32 + j] + kIq4nlValues[blk.qs[j] >> 4] * xq[b * 32 + 16 + j];
    sum += fp16_to_fp32(blk.d) * xd[b] * static_cast<float>(dot);
  }
  return sum;
}

float dot_iq4_xs(const uint8_t* row, const MatmulArgs& a, int64_t t) {
  const int64_t nb = a.n_in / kQK_K;
  const int8_t* xq = a.act.qs + t * a.n_in;
  const float* xd = a.act.d + t * nb;
  float sum = 0;
  for (int64_t b = 0; b < nb; ++b) {
    BlockIQ4_XS blk;
    std::memcpy(&blk, row + b * sizeof(BlockIQ4_XS), sizeof(BlockIQ4_XS));
    int sumi = 0;
    for (int k = 0; k < 8; ++k) {
      const uint8_t* qs = blk.qs + 16 * k;
      const int8_t* x = xq + b * kQK_K + 32 * k;
      int dot = 0;
      for (int j = 0; j < 16; ++j) dot += kIq4nlValues[qs[j] & 0xF] * x[j] + kIq4nlValues[qs[j] >> 4] * x[16 + j];
      sumi += iq4_xs_scale(blk, k) * dot;
    }
    sum += fp16_to_fp32(blk.d) * xd[b] * static_cast<float>(sumi);
  }
  return sum;
}

template <class Load>
float dot_float(const uint8_t* row, const MatmulArgs& a, int64_t t, Load load) {
  const float* x = a.x + t * a.x_stride;
  float sum = 0;
  for (int64_t i = 0; i < a.n_in; ++i) sum += load(row, i) * x[i];
  return sum;
}

float load_f32(const uint8_t* p, int64_t i) {
  float v;
  std::memcpy(&v, p + 4 * i, 4);
  return v;
}
float load_f16(const uint8_t* p, int64_t i) {
  uint16_t v;
  std::memcpy(&v, p + 2 * i, 2);
  return fp16_to_fp32(v);
}
float load_bf16(const uint8_t* p, int64_t i) {
  uint16_t v;
  std::memcpy(&v, p + 2 * i, 2);
  return bf16_to_fp32(v);
}

template <float (*Dot)(const uint8_t*, const MatmulArgs&, int64_t)>
void rows(const MatmulArgs& a, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t t = 0; t < a.n_tokens; ++t) a.y[t * a.y_stride + r] = Dot(a.w + r * a.row_bytes, a, t);
}

float dot_f32_row(const uint8_t* w, const MatmulArgs& a, int64_t t) { return dot_float(w, a, t, load_f32); }

// F16D / BF16D (--bf16-dot): what vdpbf16ps computes lane by lane — the
// weight rounded to BF16 (F16 to nearest even), times the BF16 activation,
// exact products (8-bit significands) added in fp32 in the instruction's
// order: the odd element of each pair, then the even one.
template <bool kFromF16>
float dot_bf16_pairs_row(const uint8_t* w, const MatmulArgs& a, int64_t t) {
  const uint16_t* x = a.act.bf16 + t * a.act.bf16_stride;
  float acc = 0;
  for (int64_t p = 0; p < (a.n_in + 1) / 2; ++p)
    for (int64_t k = 2 * p + 1; k >= 2 * p; --k) {
      if (k >= a.n_in) continue;
      uint16_t v;
      std::memcpy(&v, w + 2 * k, 2);
      const float wf = kFromF16 ? bf16_to_fp32(fp32_to_bf16(fp16_to_fp32(v))) : bf16_to_fp32(v);
      acc += wf * bf16_to_fp32(x[k]);
    }
  return acc;
}
float dot_f16_row(const uint8_t* w, const MatmulArgs& a, int64_t t) { return dot_float(w, a, t, load_f16); }
float dot_bf16_row(const uint8_t* w, const MatmulArgs& a, int64_t t) { return dot_float(w, a, t, load_bf16); }

}  // namespace

void register_matmul_scalar(IsaKernels& k) {
  auto set = [&](WKind kind, RowsFn fn) { k.rows[static_cast<int>(kind)] = fn; };
  set(WKind::kF32, rows<dot_f32_row>);
  set(WKind::kF16, rows<dot_f16_row>);
  set(WKind::kBF16, rows<dot_bf16_row>);
  set(WKind::kF16D, rows<dot_bf16_pairs_row<true>>);
  set(WKind::kBF16D, rows<dot_bf16_pairs_row<false>>);
  set(WKind::kQ8_0, rows<dot_legacy<BlockQ8_0>>);
  set(WKind::kQ4_0, rows<dot_legacy<BlockQ4_0>>);
  set(WKind::kQ4_1, rows<dot_legacy<BlockQ4_1>>);
  set(WKind::kQ5_0, rows<dot_legacy<BlockQ5_0>>);
  set(WKind::kQ5_1, rows<dot_legacy<BlockQ5_1>>);
  set(WKind::kQ4_K, rows<dot_k45<BlockQ4_K>>);
  set(WKind::kQ5_K, rows<dot_k45<BlockQ5_K>>);
  set(WKind::kQ6_K, rows<dot_q6_k>);
  set(WKind::kQ8_0R, rows<dot_q8_0r>);
  set(WKind::kQ2_K, rows<dot_q2_k>);
  set(WKind::kQ3_K, rows<dot_q3_k>);
  set(WKind::kIQ4_NL, rows<dot_iq4_nl>);
  set(WKind::kIQ4_XS, rows<dot_iq4_xs>);
}

}  // namespace pagoda::kernels::cpu
