// Repacked ("row-interleaved") weight layouts for the prefill GEMM and the
// decode GEMV: rows are taken in groups of 16 so one 512-bit register holds
// the same input positions of 16 output rows, and a broadcast activation
// feeds 16 rows per instruction (no horizontal sums, no per-row scale
// shuffles). Packing is scalar and ISA-independent; the kernels that read
// these layouts are cpu/packed_tiles_inl.h. A matrix whose row count is not
// a multiple of 16 gets a last group padded with zero rows, so every row of
// every matrix goes through the packed kernels.
//
// Group layouts (g = a group of 16 rows, nb = n_in / 32 blocks):
//   Q4_0: quants [nb][4][16 rows][4 bytes], byte j of row r in vector i holds
//         element 4i+j (low nibble) and 16+4i+j (high nibble) of the block;
//         then scales [nb][16] f16.                      (18 bytes/row/block)
//   Q4_1: as Q4_0, then mins [nb][16] f16.
//   Q5_0 / Q5_1: as Q4_0 / Q4_1 with a bit-4 plane after each block's 4
//         nibble vectors ([16 rows][4], bit i of byte j = element 4i+j, bit
//         4+i = element 16+4i+j).
//   Q8_0: quants [nb][8][16 rows][4 bytes] as q + 128 (u8), vector s holds
//         elements 4s..4s+3; then scales [nb][16] f16.   (34 bytes/row/block)
//   Q8_0R (W8A8): Q8_0's quants, then scales [16] f32 (one per row).
//                                            (32 bytes/row/block + 4/row)
//   Q4_K: quants [nsb][8 sub-blocks], each sub-block laid out like a Q4_0
//         block (2048 bytes per super-block); then per super-block d[16]
//         f16, dmin[16] f16, scales [8][16] u8 and mins [4 pairs][16 rows]
//         [2] u8 (sub-blocks 2p, 2p+1 adjacent), the 6-bit values
//         unpacked.                                     (148 bytes/row/256)
//   Q5_K: as Q4_K with each sub-block's nibbles followed by its bit-4 plane
//         (as Q5_0).                                    (180 bytes/row/256)
//   Q6_K: three regions, each [nsb] super-blocks long: low nibbles [8
//         sub-blocks][4][16 rows][4] as in Q4_0 (2048 bytes), high 2 bits
//         [8][2][16 rows][4] (vector 0 for elements 0..15 of the sub-block,
//         vector 1 for 16..31; bits 2i, 2i+1 of byte j = element 4i+j),
//         then scales [16][16 rows] i8 and d[16] f16; q kept 0..63 (the -32
//         goes through the activation sums).
//                                                        (210 bytes/row/256)
//   IQ4_NL: as Q4_0 (the nibbles index the IQ4 table).
//   IQ4_XS: quants [nsb][8 sub-blocks] laid out like Q4_0 blocks (2048
//         bytes per super-block), then per super-block d[16] f16 and
//         scales [8][16 rows] i8 (scale - 32).             (146 bytes/row/256)
//   Q3_K: the levels 0..7 (value + 4) as Q6_K's low-nibble region, then
//         scales [16][16 rows] i8 (-32..31) and d[16] f16 (Q6_K's meta).
//                                                        (146 bytes/row/256)
//   Q2_K: quants [nsb][16 sub-blocks][16 rows][4 bytes] (bits 2i, 2i+1 of
//         byte j = element 4i+j of the 16-element sub-block); then per
//         super-block d[16] f16, dmin[16] f16, scales [16][16 rows] u8 and
//         mins [8 pairs][16 rows][2] u8 (sub-blocks 2p, 2p+1 adjacent).
//                                                        (100 bytes/row/256)
//   F32 / F16 / BF16: [n_in][16 rows], the element type unchanged.
//   F16D / BF16D (--bf16-dot): [ceil(n_in / 2) pairs][16 rows][2] bf16,
//         F16 rounded to nearest even, a zero after an odd n_in: one zmm
//         is a pair of inputs for 16 rows, vdpbf16ps's operand.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/kernel_table.h"

namespace pagoda::kernels::cpu {

constexpr int kPackRows = 16;
// The L2 tuning of the packed prefill: a chunk of groups of about this many
// bytes stays in L2 while every tile of tokens sweeps it (the int8
// activations and their scales share L2 with it). 384 KiB measured best on
// 1-2 MiB L2 (bench/kernels/matmul_bench.cc prefill128).
constexpr int64_t kPackChunkBytes = 384 * 1024;
// Q4_K group layout offsets (bytes, per super-block).
constexpr int kPackQ4KQuants = 2048;
constexpr int kPackQ4KMeta = 320;  // d 32, dmin 32, scales 128, mins 128
// Q6_K group layout (bytes, per super-block): low nibbles, high bits, meta.
constexpr int kPackQ6KLow = 2048;
constexpr int kPackQ6KHigh = 1024;
constexpr int kPackQ6KMeta = 288;  // scales 256, d 32
// IQ4_XS group layout (bytes, per super-block): quants as Q4_K's, then meta.
constexpr int kPackIQ4XSMeta = 160;  // d 32, scales 128
// Q2_K group layout (bytes, per super-block): quants, then meta.
constexpr int kPackQ2KQuants = 1024;
constexpr int kPackQ2KMeta = 576;  // d 32, dmin 32, scales 256, mins 256

// Whether `kind` has a packed layout at all.
bool packable(WKind kind);

// Bytes of one packed group of 16 rows of n_in elements.
size_t packed_group_bytes(WKind kind, int64_t n_in);

// Packs the groups [g0, g1) of the n_rows rows of w (row r at w + r *
// row_bytes) into out (group g at out + (g - g0) * packed_group_bytes);
// rows from n_rows on are zeros.
void pack_groups(WKind kind, const uint8_t* w, size_t row_bytes, int64_t n_in, int64_t n_rows, int64_t g0, int64_t g1,
                 uint8_t* out);

}  // namespace pagoda::kernels::cpu
