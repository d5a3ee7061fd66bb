#include "kernels/cpu/pack.h"

#include <cstring>
#include <type_traits>
#include <vector>

#include "core/check.h"
#include "core/fp16.h"
#include "kernels/ref/blocks.h"

namespace pagoda::kernels::cpu {
namespace {

constexpr int kQ4Bytes = 4 * kPackRows * 4;  // per block and group
constexpr int kQ8Bytes = 8 * kPackRows * 4;
constexpr int kScaleBytes = kPackRows * 2;

int elem_bytes(WKind kind) { return kind == WKind::kF32 ? 4 : 2; }

// Bit 4 of element k (0..31) of a Q5_0 / Q5_1 block.
template <class Block>
uint8_t q5_bit(const Block& b, int k) {
  uint32_t qh;
  std::memcpy(&qh, b.qh, 4);
  return static_cast<uint8_t>((qh >> k) & 1);
}

// The 32-element types: nibble vectors as in the header, for the 5-bit
// types a bit-4 plane after them, then d (and m) regions.
template <class Block, bool kFive, bool kMin>
void pack_group_legacy(const uint8_t* const* rows, int64_t nb, uint8_t* out) {
  constexpr int kQ = kQ4Bytes + (kFive ? 64 : 0);
  uint8_t* scales = out + nb * kQ;
  uint8_t* mins = scales + nb * kScaleBytes;
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* q = out + b * kQ;
    for (int r = 0; r < kPackRows; ++r) {
      const auto& blk = reinterpret_cast<const Block*>(rows[r])[b];
      auto nib = [&](int k) -> uint8_t {
        const uint8_t* qs = blk.qs;
        return k < 16 ? (qs[k] & 0x0F) : (qs[k - 16] >> 4);
      };
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) {
          q[64 * i + 4 * r + j] = static_cast<uint8_t>(nib(4 * i + j) | (nib(16 + 4 * i + j) << 4));
          if constexpr (kFive) {
            uint8_t& h = q[256 + 4 * r + j];
            h = static_cast<uint8_t>((i == 0 ? 0 : h) | (q5_bit(blk, 4 * i + j) << i) |
                                     (q5_bit(blk, 16 + 4 * i + j) << (4 + i)));
          }
        }
      std::memcpy(scales + b * kScaleBytes + 2 * r, &blk.d, 2);
      if constexpr (kMin) std::memcpy(mins + b * kScaleBytes + 2 * r, &blk.m, 2);
    }
  }
}

// The quant vectors of Q8_0 and W8A8 (q + 128).
void pack_q8_quants(const uint8_t* const* rows, int64_t nb, uint8_t* out) {
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* q = out + b * kQ8Bytes;
    for (int r = 0; r < kPackRows; ++r) {
      const auto& blk = reinterpret_cast<const ref::BlockQ8_0*>(rows[r])[b];
      for (int s = 0; s < 8; ++s)
        for (int j = 0; j < 4; ++j) q[64 * s + 4 * r + j] = static_cast<uint8_t>(blk.qs[4 * s + j] + 128);
    }
  }
}

void pack_group_q8_0(const uint8_t* const* rows, int64_t nb, uint8_t* out) {
  pack_q8_quants(rows, nb, out);
  uint8_t* scales = out + nb * kQ8Bytes;
  for (int64_t b = 0; b < nb; ++b)
    for (int r = 0; r < kPackRows; ++r)
      std::memcpy(scales + b * kScaleBytes + 2 * r, &reinterpret_cast<const ref::BlockQ8_0*>(rows[r])[b].d, 2);
}

// W8A8: Q8_0's quant vectors, then each row's scale (its block 0's) as f32.
void pack_group_q8_0r(const uint8_t* const* rows, int64_t nb, uint8_t* out) {
  pack_q8_quants(rows, nb, out);
  for (int r = 0; r < kPackRows; ++r) {
    uint16_t d;
    std::memcpy(&d, rows[r], 2);
    const float f = fp16_to_fp32(d);
    std::memcpy(out + nb * kQ8Bytes + 4 * r, &f, 4);
  }
}

template <class Block>
void pack_group_k45(const uint8_t* const* rows, int64_t nsb, uint8_t* out) {
  constexpr bool kFive = std::is_same_v<Block, ref::BlockQ5_K>;
  constexpr int kSub = kQ4Bytes + (kFive ? 64 : 0);  // bytes per sub-block
  uint8_t* meta = out + nsb * 8 * kSub;
  for (int64_t b = 0; b < nsb; ++b) {
    uint8_t* m = meta + b * kPackQ4KMeta;
    for (int r = 0; r < kPackRows; ++r) {
      const auto& blk = reinterpret_cast<const Block*>(rows[r])[b];
      auto bit4 = [&](int j, int l) -> uint8_t {
        if constexpr (kFive) return (blk.qh[l] >> j) & 1;
        return 0;
      };
      // element 32j + l of the super-block as its nibble
      auto nib = [&](int j, int l) -> uint8_t {
        const uint8_t v = blk.qs[32 * (j / 2) + l];
        return (j % 2) ? (v >> 4) : (v & 0x0F);
      };
      for (int j = 0; j < 8; ++j) {
        uint8_t* q = out + (b * 8 + j) * kSub;
        for (int i = 0; i < 4; ++i)
          for (int jj = 0; jj < 4; ++jj) {
            q[64 * i + 4 * r + jj] = static_cast<uint8_t>(nib(j, 4 * i + jj) | (nib(j, 16 + 4 * i + jj) << 4));
            if constexpr (kFive) {
              uint8_t& h = q[256 + 4 * r + jj];
              h = static_cast<uint8_t>((i == 0 ? 0 : h) | (bit4(j, 4 * i + jj) << i) |
                                       (bit4(j, 16 + 4 * i + jj) << (4 + i)));
            }
          }
        uint8_t sc, mn;
        ref::get_scale_min_k4(j, blk.scales, &sc, &mn);
        m[64 + 16 * j + r] = sc;
        m[192 + 32 * (j / 2) + 2 * r + (j % 2)] = mn;
      }
      std::memcpy(m + 2 * r, &blk.d, 2);
      std::memcpy(m + 32 + 2 * r, &blk.dmin, 2);
    }
  }
}

// Element e (0..255) of a Q6_K super-block as its unsigned 6-bit value.
uint8_t q6_value(const ref::BlockQ6_K& b, int e) {
  const int h = e / 128, s = (e % 128) / 32, l = e % 32;
  const uint8_t lo = b.ql[64 * h + l + 32 * (s % 2)];
  const uint8_t nib = s < 2 ? (lo & 0x0F) : (lo >> 4);
  const uint8_t hi = (b.qh[32 * h + l] >> (2 * s)) & 3;
  return static_cast<uint8_t>(nib | (hi << 4));
}

void pack_group_q6_k(const uint8_t* const* rows, int64_t nsb, uint8_t* out) {
  for (int64_t b = 0; b < nsb; ++b) {
    uint8_t* low = out + b * kPackQ6KLow;
    uint8_t* high = out + nsb * kPackQ6KLow + b * kPackQ6KHigh;
    uint8_t* meta = out + nsb * (kPackQ6KLow + kPackQ6KHigh) + b * kPackQ6KMeta;
    for (int r = 0; r < kPackRows; ++r) {
      const auto& blk = reinterpret_cast<const ref::BlockQ6_K*>(rows[r])[b];
      for (int j = 0; j < 8; ++j)
        for (int i = 0; i < 4; ++i)
          for (int jj = 0; jj < 4; ++jj) {
            const uint8_t qa = q6_value(blk, 32 * j + 4 * i + jj);
            const uint8_t qb = q6_value(blk, 32 * j + 16 + 4 * i + jj);
            low[j * 256 + 64 * i + 4 * r + jj] = static_cast<uint8_t>((qa & 0x0F) | ((qb & 0x0F) << 4));
            uint8_t& ha = high[j * 128 + 4 * r + jj];
            uint8_t& hb = high[j * 128 + 64 + 4 * r + jj];
            ha = static_cast<uint8_t>((i == 0 ? 0 : ha) | ((qa >> 4) << (2 * i)));
            hb = static_cast<uint8_t>((i == 0 ? 0 : hb) | ((qb >> 4) << (2 * i)));
          }
      for (int sidx = 0; sidx < 16; ++sidx) meta[16 * sidx + r] = static_cast<uint8_t>(blk.scales[sidx]);
      std::memcpy(meta + 256 + 2 * r, &blk.d, 2);
    }
  }
}

void pack_group_iq4_xs(const uint8_t* const* rows, int64_t nsb, uint8_t* out) {
  for (int64_t b = 0; b < nsb; ++b) {
    uint8_t* meta = out + nsb * kPackQ4KQuants + b * kPackIQ4XSMeta;
    for (int r = 0; r < kPackRows; ++r) {
      const auto& blk = reinterpret_cast<const ref::BlockIQ4_XS*>(rows[r])[b];
      for (int k = 0; k < 8; ++k) {
        uint8_t* q = out + b * kPackQ4KQuants + k * kQ4Bytes;
        const uint8_t* qs = blk.qs + 16 * k;
        auto nib = [&](int e) -> int { return e < 16 ? (qs[e] & 0x0F) : (qs[e - 16] >> 4); };
        for (int i = 0; i < 4; ++i)
          for (int j = 0; j < 4; ++j)
            q[64 * i + 4 * r + j] = static_cast<uint8_t>(nib(4 * i + j) | (nib(16 + 4 * i + j) << 4));
        meta[32 + 16 * k + r] = static_cast<uint8_t>(static_cast<int8_t>(ref::iq4_xs_scale(blk, k)));
      }
      std::memcpy(meta + 2 * r, &blk.d, 2);
    }
  }
}

void pack_group_q3_k(const uint8_t* const* rows, int64_t nsb, uint8_t* out) {
  for (int64_t b = 0; b < nsb; ++b) {
    uint8_t* low = out + b * kPackQ6KLow;
    uint8_t* meta = out + nsb * kPackQ6KLow + b * kPackQ6KMeta;
    for (int r = 0; r < kPackRows; ++r) {
      const auto& blk = reinterpret_cast<const ref::BlockQ3_K*>(rows[r])[b];
      auto level = [&](int e) { return ref::k_quant_2bits(blk.qs, e) + 4 * ((blk.hmask[e % 32] >> (e / 32)) & 1); };
      for (int j = 0; j < 8; ++j)
        for (int i = 0; i < 4; ++i)
          for (int jj = 0; jj < 4; ++jj)
            low[j * 256 + 64 * i + 4 * r + jj] =
                static_cast<uint8_t>(level(32 * j + 4 * i + jj) | (level(32 * j + 16 + 4 * i + jj) << 4));
      int8_t sc[16];
      ref::get_scales_q3_k(blk, sc);
      for (int k = 0; k < 16; ++k) meta[16 * k + r] = static_cast<uint8_t>(sc[k]);
      std::memcpy(meta + 256 + 2 * r, &blk.d, 2);
    }
  }
}

void pack_group_q2_k(const uint8_t* const* rows, int64_t nsb, uint8_t* out) {
  for (int64_t b = 0; b < nsb; ++b) {
    uint8_t* q = out + b * kPackQ2KQuants;
    uint8_t* meta = out + nsb * kPackQ2KQuants + b * kPackQ2KMeta;
    for (int r = 0; r < kPackRows; ++r) {
      const auto& blk = reinterpret_cast<const ref::BlockQ2_K*>(rows[r])[b];
      auto level = [&](int e) { return ref::k_quant_2bits(blk.qs, e); };
      for (int k = 0; k < 16; ++k)
        for (int j = 0; j < 4; ++j) {
          uint8_t v = 0;
          for (int i = 0; i < 4; ++i) v = static_cast<uint8_t>(v | (level(16 * k + 4 * i + j) << (2 * i)));
          q[64 * k + 4 * r + j] = v;
        }
      std::memcpy(meta + 2 * r, &blk.d, 2);
      std::memcpy(meta + 32 + 2 * r, &blk.dmin, 2);
      for (int k = 0; k < 16; ++k) {
        meta[64 + 16 * k + r] = blk.scales[k] & 0xF;
        meta[320 + 32 * (k / 2) + 2 * r + k % 2] = blk.scales[k] >> 4;
      }
    }
  }
}

// F16D / BF16D: pairs of inputs of 16 rows, as BF16.
template <bool kFromF16>
void pack_group_bf16_pairs(const uint8_t* const* rows, int64_t n_in, uint8_t* out) {
  auto* o = reinterpret_cast<uint16_t*>(out);
  for (int64_t p = 0; p < (n_in + 1) / 2; ++p)
    for (int r = 0; r < kPackRows; ++r)
      for (int e = 0; e < 2; ++e) {
        const int64_t k = 2 * p + e;
        uint16_t v = 0;
        if (k < n_in) {
          std::memcpy(&v, rows[r] + 2 * k, 2);
          if (kFromF16) v = fp32_to_bf16(fp16_to_fp32(v));
        }
        o[(p * kPackRows + r) * 2 + e] = v;
      }
}

void pack_group_float(const uint8_t* const* rows, int64_t n_in, int eb, uint8_t* out) {
  for (int64_t k = 0; k < n_in; ++k)
    for (int r = 0; r < kPackRows; ++r) std::memcpy(out + (k * kPackRows + r) * eb, rows[r] + k * eb, eb);
}

}  // namespace

bool packable(WKind kind) {
  switch (kind) {
    case WKind::kF32:
    case WKind::kF16:
    case WKind::kBF16:
    case WKind::kQ4_0:
    case WKind::kQ4_1:
    case WKind::kQ5_0:
    case WKind::kQ5_1:
    case WKind::kQ8_0:
    case WKind::kQ8_0R:
    case WKind::kQ2_K:
    case WKind::kQ3_K:
    case WKind::kIQ4_NL:
    case WKind::kIQ4_XS:
    case WKind::kQ4_K:
    case WKind::kQ5_K:
    case WKind::kQ6_K:
    case WKind::kF16D:
    case WKind::kBF16D: return true;
    default: return false;
  }
}

size_t packed_group_bytes(WKind kind, int64_t n_in) {
  const auto nb = static_cast<size_t>(n_in / 32);
  switch (kind) {
    case WKind::kQ4_0: return nb * (kQ4Bytes + kScaleBytes);
    case WKind::kQ4_1: return nb * (kQ4Bytes + 2 * kScaleBytes);
    case WKind::kQ5_0: return nb * (kQ4Bytes + 64 + kScaleBytes);
    case WKind::kQ5_1: return nb * (kQ4Bytes + 64 + 2 * kScaleBytes);
    case WKind::kQ8_0: return nb * (kQ8Bytes + kScaleBytes);
    case WKind::kQ8_0R: return nb * kQ8Bytes + kPackRows * sizeof(float);
    case WKind::kQ2_K: return static_cast<size_t>(n_in / 256) * (kPackQ2KQuants + kPackQ2KMeta);
    case WKind::kQ3_K: return static_cast<size_t>(n_in / 256) * (kPackQ6KLow + kPackQ6KMeta);
    case WKind::kIQ4_NL: return nb * (kQ4Bytes + kScaleBytes);
    case WKind::kIQ4_XS: return static_cast<size_t>(n_in / 256) * (kPackQ4KQuants + kPackIQ4XSMeta);
    case WKind::kQ4_K: return static_cast<size_t>(n_in / 256) * (kPackQ4KQuants + kPackQ4KMeta);
    case WKind::kQ5_K: return static_cast<size_t>(n_in / 256) * (kPackQ4KQuants + 8 * 64 + kPackQ4KMeta);
    case WKind::kQ6_K: return static_cast<size_t>(n_in / 256) * (kPackQ6KLow + kPackQ6KHigh + kPackQ6KMeta);
    case WKind::kF32:
    case WKind::kF16:
    case WKind::kBF16: return static_cast<size_t>(n_in) * kPackRows * elem_bytes(kind);
    case WKind::kF16D:
    case WKind::kBF16D: return static_cast<size_t>((n_in + 1) / 2) * kPackRows * 4;
    default: return 0;
  }
}

void pack_groups(WKind kind, const uint8_t* w, size_t row_bytes, int64_t n_in, int64_t n_rows, int64_t g0, int64_t g1,
                 uint8_t* out) {
  PAGODA_CHECK(packable(kind));
  const size_t gb = packed_group_bytes(kind, n_in);
  std::vector<uint8_t> zero_row;
  if (g1 * kPackRows > n_rows) zero_row.assign(row_bytes, 0);  // zero scales: the padding rows are 0
  for (int64_t g = g0; g < g1; ++g) {
    const uint8_t* rows[kPackRows];
    for (int r = 0; r < kPackRows; ++r) {
      const int64_t row = g * kPackRows + r;
      rows[r] = row < n_rows ? w + row * row_bytes : zero_row.data();
    }
    uint8_t* dst = out + (g - g0) * gb;
    switch (kind) {
      case WKind::kQ4_0: pack_group_legacy<ref::BlockQ4_0, false, false>(rows, n_in / 32, dst); break;
      case WKind::kQ4_1: pack_group_legacy<ref::BlockQ4_1, false, true>(rows, n_in / 32, dst); break;
      case WKind::kQ5_0: pack_group_legacy<ref::BlockQ5_0, true, false>(rows, n_in / 32, dst); break;
      case WKind::kQ5_1: pack_group_legacy<ref::BlockQ5_1, true, true>(rows, n_in / 32, dst); break;
      case WKind::kQ8_0: pack_group_q8_0(rows, n_in / 32, dst); break;
      case WKind::kQ8_0R: pack_group_q8_0r(rows, n_in / 32, dst); break;
      case WKind::kQ4_K: pack_group_k45<ref::BlockQ4_K>(rows, n_in / 256, dst); break;
      case WKind::kQ5_K: pack_group_k45<ref::BlockQ5_K>(rows, n_in / 256, dst); break;
      case WKind::kQ6_K: pack_group_q6_k(rows, n_in / 256, dst); break;
      case WKind::kQ2_K: pack_group_q2_k(rows, n_in / 256, dst); break;
      case WKind::kQ3_K: pack_group_q3_k(rows, n_in / 256, dst); break;
      case WKind::kIQ4_NL: pack_group_legacy<ref::BlockIQ4_NL, false, false>(rows, n_in / 32, dst); break;
      case WKind::kIQ4_XS: pack_group_iq4_xs(rows, n_in / 256, dst); break;
      case WKind::kF16D: pack_group_bf16_pairs<true>(rows, n_in, dst); break;
      case WKind::kBF16D: pack_group_bf16_pairs<false>(rows, n_in, dst); break;
      default: pack_group_float(rows, n_in, elem_bytes(kind), dst); break;
    }
  }
}

}  // namespace pagoda::kernels::cpu
