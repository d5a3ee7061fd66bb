// Scale searches shared by the reference quantizers (kernels/ref only).
#pragma once

namespace pagoda::ref {

// Symmetric fit x ~= s * L, L an integer in [lo, hi] (lo < 0 < hi): the s
// minimizing sum w_i (x_i - s L_i)^2 over candidate scales that map the
// largest |x| near lo or hi, each refined by least squares. w: n weights or
// null (all 1). 0 for an all-zero x.
float fit_symmetric(const float* x, const float* w, int n, int lo, int hi);

// Nearest integer in [lo, hi] (halves away from zero; NaN gives lo), with
// no libm call: it runs for every element of every candidate scale.
int clamp_round(float v, int lo, int hi);

}  // namespace pagoda::ref
