// SmoothQuant (Xiao et al. 2023): W8A8 with the activation outliers moved
// into the weights. Per input channel j of a group of matrices sharing an
// input (AwqGroup: q/k/v, gate/up, and o / down with their scales folded
// into v / up), s_j = max|X_j|^alpha / max|W_j|^(1 - alpha); the input is
// divided by s (folded into the RMSNorm weight or the previous matrix's
// rows, awq_fold) and the weight columns multiplied by it, which leaves the
// unquantized model's function unchanged while flattening the per-token
// activation range. The matrices are then stored as Q8_0 rows that share
// one scale (ref::quantize_row_q8_0_shared_scale) and run with per-token
// int8 activations (kernels::q8_0_rows_share_scale).
#pragma once

#include <cstdint>
#include <vector>

#include "quant/awq.h"

namespace pagoda::quant {

// The group's num_scales() smoothing scales from the per-input-column
// activation maxima act_max (g.cols of them). Channels whose activation or
// weight column is all zero keep s = 1; s is clamped to [1e-4, 1e4].
std::vector<float> smoothquant_scales(const AwqGroup& g, const std::vector<float>& act_max, float alpha);

}  // namespace pagoda::quant
