#include "quant/gptq.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "kernels/ref/quant_ref.h"
#include "quant/block_grid.h"

namespace pagoda::quant {
namespace {

// In-place lower Cholesky factor of a (n x n, row-major); false if not
// positive definite.
bool cholesky_lower(std::vector<double>& a, int64_t n, ThreadPool& pool) {
  for (int64_t j = 0; j < n; ++j) {
    double d = a[j * n + j];
    for (int64_t k = 0; k < j; ++k) d -= a[j * n + k] * a[j * n + k];
    if (!(d > 0)) return false;
    const double ljj = std::sqrt(d);
    a[j * n + j] = ljj;
    auto column = [&](int64_t i0, int64_t i1) {
      for (int64_t i = j + 1 + i0; i < j + 1 + i1; ++i) {
        double s = a[i * n + j];
        const double* ai = &a[i * n];
        const double* aj = &a[j * n];
        for (int64_t k = 0; k < j; ++k) s -= ai[k] * aj[k];
        a[i * n + j] = s / ljj;
      }
    };
    // One column is (n - j) dots of length j: hand it to the pool only when
    // that outweighs waking the threads.
    if ((n - j) * j >= (int64_t{1} << 16))
      pool.parallel_for(n - j - 1, column);
    else
      column(0, n - j - 1);
  }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = i + 1; j < n; ++j) a[i * n + j] = 0;
  return true;
}

}  // namespace

void accumulate_hessian(const float* x, int64_t stride, int64_t n, int64_t cols, double* h, ThreadPool& pool) {
  pool.parallel_for(cols, [&](int64_t i0, int64_t i1) {
    for (int64_t t = 0; t < n; ++t) {
      const float* xt = x + t * stride;
      for (int64_t i = i0; i < i1; ++i) {
        const double xi = xt[i];
        if (xi == 0) continue;
        double* hi = h + i * cols;
        for (int64_t j = 0; j < cols; ++j) hi[j] += xi * xt[j];
      }
    }
  });
}

Status gptq_inverse_factor(std::vector<double>& h, int64_t n, double damp, std::vector<double>* u, ThreadPool& pool) {
  double mean_diag = 0;
  for (int64_t i = 0; i < n; ++i) mean_diag += h[i * n + i];
  mean_diag /= static_cast<double>(std::max<int64_t>(n, 1));
  if (!(mean_diag > 0)) mean_diag = 1;
  // Dampening grows tenfold until H is numerically positive definite.
  for (int attempt = 0; attempt < 6; ++attempt, damp *= 10) {
    std::vector<double> l = h;
    for (int64_t i = 0; i < n; ++i) l[i * n + i] += damp * mean_diag;
    if (!cholesky_lower(l, n, pool)) continue;
    // L^-1 (lower), column by column by forward substitution.
    // Stored transposed (lit[c][i] = L^-1[i][c]) so both loops below run
    // along rows.
    std::vector<double> lit(static_cast<size_t>(n * n), 0.0);
    pool.parallel_for(n, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        double* col = &lit[c * n];
        for (int64_t i = c; i < n; ++i) {
          double s = i == c ? 1.0 : 0.0;
          const double* li = &l[i * n];
          for (int64_t k = c; k < i; ++k) s -= li[k] * col[k];
          col[i] = s / li[i];
        }
      }
    });
    // H^-1 = L^-T L^-1: entry (i, j) is the dot of columns i and j of L^-1.
    std::vector<double> hinv(static_cast<size_t>(n * n));
    pool.parallel_for(n, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t j = i; j < n; ++j) {
          double s = 0;
          const double* ci = &lit[i * n];
          const double* cj = &lit[j * n];
          for (int64_t k = j; k < n; ++k) s += ci[k] * cj[k];
          hinv[i * n + j] = s;
        }
    });
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < i; ++j) hinv[i * n + j] = hinv[j * n + i];
    if (!cholesky_lower(hinv, n, pool)) continue;
    // U = L2^T: row i of U is column i of L2.
    u->assign(static_cast<size_t>(n * n), 0.0);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = i; j < n; ++j) (*u)[i * n + j] = hinv[j * n + i];
    return Status::ok();
  }
  return invalid_argument("GPTQ: the Hessian stays singular after dampening (no calibration data reached the layer?)");
}

namespace {

Status check_grid(DType type, int64_t cols) {
  if (!has_block_grid(type))
    return invalid_argument("GPTQ needs a block-quantized type, not " + std::string(dtype_name(type)));
  if (cols % dtype_block_size(type) != 0)
    return invalid_argument("GPTQ: rows of " + std::to_string(cols) + " do not fit " + std::string(dtype_name(type)) +
                            " blocks");
  return Status::ok();
}

}  // namespace

Status gptq_factor(std::vector<double> h, int64_t cols, const GptqOptions& opt, GptqFactor* f, ThreadPool& pool) {
  const int64_t n = cols;
  // Dead inputs (never non-zero in calibration) carry no information: a unit
  // diagonal makes their weights round to the grid, with no error feedback
  // to or from other columns. (The paper's code zeroes them; a column idle
  // in a small calibration set may still be used later.)
  for (int64_t i = 0; i < n; ++i)
    if (h[i * n + i] == 0) h[i * n + i] = 1;
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  if (opt.act_order) {
    std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) { return h[a * n + a] > h[b * n + b]; });
    std::vector<double> hp(static_cast<size_t>(n * n));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) hp[i * n + j] = h[perm[i] * n + perm[j]];
    h.swap(hp);
  }
  std::vector<double> u;
  PAGODA_RETURN_IF_ERROR(gptq_inverse_factor(h, n, opt.damp, &u, pool));
  f->cols = n;
  f->perm = std::move(perm);
  f->u = std::move(u);
  return Status::ok();
}

Status gptq_quantize(DType type, float* w, int64_t rows, int64_t cols, std::vector<double> h, const GptqOptions& opt,
                     uint8_t* out, ThreadPool& pool) {
  PAGODA_RETURN_IF_ERROR(check_grid(type, cols));
  GptqFactor f;
  PAGODA_RETURN_IF_ERROR(gptq_factor(std::move(h), cols, opt, &f, pool));
  return gptq_quantize(type, w, rows, f, opt, out, pool);
}

Status gptq_quantize(DType type, float* w, int64_t rows, const GptqFactor& f, const GptqOptions& opt, uint8_t* out,
                     ThreadPool& pool) {
  const int64_t cols = f.cols, n = f.cols;
  if (cols <= 0 || f.u.size() != static_cast<size_t>(n * n) || f.perm.size() != static_cast<size_t>(n))
    return invalid_argument("GPTQ: no factor (gptq_factor failed or was not run)");
  PAGODA_RETURN_IF_ERROR(check_grid(type, cols));
  const int bs = dtype_block_size(type);
  const std::vector<int64_t>& perm = f.perm;
  const std::vector<double>& u = f.u;
  const size_t row_bytes = dtype_row_bytes(type, cols);
  const int64_t blocks_per_row = cols / bs;
  const float* imp = opt.importance.empty() ? nullptr : opt.importance.data();
  // Static grids (act-order): every block's scales from the original weights.
  if (opt.act_order)
    pool.parallel_for(rows, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) ref::quantize_row(type, w + r * cols, out + r * row_bytes, cols, imp);
    });

  // Lazy blocks and grid blocks nest (one is a multiple of the other), so a
  // block's columns hold every earlier update when its scales are fixed.
  int64_t lazy = std::max(1, opt.lazy_block);
  if (lazy % bs != 0 && bs % lazy != 0) lazy = bs;
  constexpr int64_t kGroup = 16;  // rows that share one pass over U
  const int64_t num_groups = (rows + kGroup - 1) / kGroup;
  pool.parallel_for(num_groups, [&](int64_t g0, int64_t g1) {
    std::vector<double> wp(static_cast<size_t>(kGroup * n));      // permuted rows
    std::vector<double> err(static_cast<size_t>(kGroup * lazy));  // scaled errors of the lazy block
    std::vector<int> levels(static_cast<size_t>(kGroup * n));
    std::vector<BlockGrid> grids(static_cast<size_t>(kGroup * blocks_per_row));
    std::vector<char> have_grid(static_cast<size_t>(kGroup * blocks_per_row));
    std::vector<float> block_vals(static_cast<size_t>(bs));
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t r_begin = g * kGroup, nr = std::min(kGroup, rows - r_begin);
      for (int64_t r = 0; r < nr; ++r)
        for (int64_t i = 0; i < n; ++i) wp[r * n + i] = w[(r_begin + r) * cols + perm[i]];
      std::fill(have_grid.begin(), have_grid.end(), 0);
      if (opt.act_order)
        for (int64_t r = 0; r < nr; ++r)
          for (int64_t b = 0; b < blocks_per_row; ++b)
            grid_of_block(type, out + (r_begin + r) * row_bytes + b * dtype_type_size(type),
                          &grids[r * blocks_per_row + b]);
      for (int64_t i1 = 0; i1 < n; i1 += lazy) {
        const int64_t i2 = std::min(n, i1 + lazy);
        for (int64_t i = i1; i < i2; ++i) {
          const int64_t col = perm[i], blk = col / bs;
          const int e = static_cast<int>(col % bs);
          const double uii = u[i * n + i];
          for (int64_t r = 0; r < nr; ++r) {
            double* wr = &wp[r * n];
            BlockGrid& grid = grids[r * blocks_per_row + blk];
            if (!have_grid[r * blocks_per_row + blk] && !opt.act_order) {
              // In natural order the block starts here and its columns hold
              // every update so far: fix its scales now.
              for (int k = 0; k < bs; ++k) block_vals[k] = static_cast<float>(wr[i + k]);
              uint8_t* dst = out + (r_begin + r) * row_bytes + blk * dtype_type_size(type);
              ref::quantize_row(type, block_vals.data(), dst, bs, imp ? imp + blk * bs : nullptr);
              grid_of_block(type, dst, &grid);
            }
            have_grid[r * blocks_per_row + blk] = 1;
            const int q = grid.level(e, static_cast<float>(wr[i]));
            levels[r * n + col] = q;
            const double qv = grid.value(e, q);
            const double er = (wr[i] - qv) / uii;
            wr[i] = qv;
            err[r * lazy + (i - i1)] = er;
            const double* ui = &u[i * n];
            for (int64_t j = i + 1; j < i2; ++j) wr[j] -= er * ui[j];
          }
        }
        // The lazy block's errors onto every later column at once.
        for (int64_t i = i1; i < i2; ++i) {
          const double* ui = &u[i * n];
          for (int64_t r = 0; r < nr; ++r) {
            const double er = err[r * lazy + (i - i1)];
            if (er == 0) continue;
            double* wr = &wp[r * n];
            for (int64_t j = i2; j < n; ++j) wr[j] -= er * ui[j];
          }
        }
      }
      for (int64_t r = 0; r < nr; ++r) {
        uint8_t* row = out + (r_begin + r) * row_bytes;
        for (int64_t b = 0; b < blocks_per_row; ++b)
          set_block_levels(type, row + b * dtype_type_size(type), &levels[r * n + b * bs]);
        ref::dequantize_row(type, row, w + (r_begin + r) * cols, cols);
      }
    }
  });
  return Status::ok();
}

}  // namespace pagoda::quant
