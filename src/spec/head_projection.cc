#include "spec/head_projection.h"

#include "kernels/ref/quant_ref.h"

namespace pagoda {

HeadProjection::HeadProjection(const kernels::WeightView& output, ThreadPool& pool) : view_(output) {
  const bool wide = output.type == DType::kF32 || output.type == DType::kF16 || output.type == DType::kBF16;
  if (!wide || output.n_in % 32 != 0 || output.data == nullptr) return;
  kernels::WeightView q;
  q.type = DType::kQ8_0;
  q.n_in = output.n_in;
  q.n_out = output.n_out;
  const size_t in_bytes = output.row_bytes(), out_bytes = q.row_bytes();
  q8_.resize(out_bytes * static_cast<size_t>(output.n_out));
  pool.parallel_for(output.n_out, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(static_cast<size_t>(output.n_in));
    for (int64_t r = r0; r < r1; ++r) {
      ref::dequantize_row(output.type, static_cast<const uint8_t*>(output.data) + r * in_bytes, row.data(),
                          output.n_in);
      ref::quantize_row(DType::kQ8_0, row.data(), &q8_[static_cast<size_t>(r) * out_bytes], output.n_in);
    }
  });
  q.data = q8_.data();
  view_ = q;
  kernels::WeightView* w = &view_;
  // Without a packed copy (PAGODA_REPACK=0) the matmul runs the reference kernel.
  if (kernels::repack_enabled()) packed_.pack(&w, 1, pool);
}

void HeadProjection::project(const float* hidden, int32_t rows, float* logits, ThreadPool& pool) const {
  kernels::matmul(view_, hidden, view_.n_in, rows, logits, view_.n_out, pool);
}

}  // namespace pagoda
