#include "quant/quantize_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <vector>

#include "core/thread_pool.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/ref/quant_ref.h"
#include "model/llama_model.h"
#include "model/model_config.h"
#include "quant/block_grid.h"
#include "quant/calibration.h"
#include "quant/imatrix.h"
#include "quant/smoothquant.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::quant {
namespace {

using Clock = std::chrono::steady_clock;

struct Plan {
  const gguf::TensorInfo* src = nullptr;
  DType type = DType::kF32;
  bool quantize = false;       // converted (otherwise copied as is)
  std::vector<uint8_t> bytes;  // the output data, once done
  bool done = false;
  bool gptq = false;
  bool w8a8 = false;  // Q8_0 with one scale per row (SmoothQuant)
  double seconds = 0;
  size_t in_bytes = 0;  // in the input file
};

int64_t rows_of(const gguf::TensorInfo& t) {
  int64_t r = 1;
  for (size_t i = 1; i < t.dims.size(); ++i) r *= t.dims[i];
  return r;
}

std::string dims_str(const std::vector<int64_t>& d) {
  std::string s;
  for (size_t i = 0; i < d.size(); ++i) {
    if (i) s += " x ";
    s += std::to_string(d[i]);
  }
  return s;
}

// Round-to-nearest (importance-weighted when `importance` is not empty), rows in parallel.
void quantize_rtn(const gguf::TensorInfo& t, DType type, const std::vector<float>& importance, ThreadPool& pool,
                  std::vector<uint8_t>* out) {
  const int64_t cols = t.dims[0], rows = rows_of(t);
  const size_t in_row = dtype_row_bytes(t.type, cols), out_row = dtype_row_bytes(type, cols);
  out->resize(out_row * static_cast<size_t>(rows));
  const float* imp = importance.empty() ? nullptr : importance.data();
  pool.parallel_for(rows, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = r0; r < r1; ++r) {
      ref::dequantize_row(t.type, t.data + r * in_row, row.data(), cols);
      ref::quantize_row(type, row.data(), out->data() + r * out_row, cols, imp);
    }
  });
}

// W8A8: Q8_0 rows that share one scale (the input is F32 after smoothing).
void quantize_shared_scale(const gguf::TensorInfo& t, ThreadPool& pool, std::vector<uint8_t>* out) {
  const int64_t cols = t.dims[0], rows = rows_of(t);
  const size_t out_row = dtype_row_bytes(DType::kQ8_0, cols);
  out->resize(out_row * static_cast<size_t>(rows));
  const auto* w = reinterpret_cast<const float*>(t.data);
  pool.parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      ref::quantize_row_q8_0_shared_scale(w + r * cols, out->data() + r * out_row, cols);
  });
}

// The model with every quantizable matrix as F32, in memory (GPTQ
// rewrites the matrices in place as it quantizes them).
struct F32Model {
  std::vector<uint8_t> bytes;
  std::unique_ptr<gguf::GGUFFile> file;
  float* tensor(const std::string& name) {
    const auto* t = file->tensor(name);
    if (!t || t->type != DType::kF32) return nullptr;
    return reinterpret_cast<float*>(bytes.data() + (t->data - bytes.data()));
  }
};

// all_f32: also the F16/BF16 vectors (norms, biases), which AWQ rescales.
Result<F32Model> f32_model(const gguf::GGUFFile& in, const std::vector<Plan>& plans, bool all_f32, ThreadPool& pool) {
  gguf::GGUFWriter w;
  for (const auto& [k, v] : in.metadata())
    if (k != "general.alignment") w.set(k, v);
  std::vector<std::vector<float>> converted;
  converted.reserve(plans.size());
  for (const Plan& p : plans) {
    const gguf::TensorInfo& t = *p.src;
    const bool convert = p.quantize || (all_f32 && (t.type == DType::kF16 || t.type == DType::kBF16));
    if (!convert || t.type == DType::kF32) {
      w.add_tensor(t.name, t.dims, t.type, t.data, t.num_bytes);
      continue;
    }
    auto& f = converted.emplace_back(static_cast<size_t>(t.num_elements()));
    const int64_t cols = t.dims[0];
    const size_t in_row = dtype_row_bytes(t.type, cols);
    pool.parallel_for(rows_of(t), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) ref::dequantize_row(t.type, t.data + r * in_row, &f[r * cols], cols);
    });
    w.add_tensor(t.name, t.dims, DType::kF32, f.data(), f.size() * sizeof(float));
  }
  F32Model m;
  m.bytes = w.to_bytes();
  PAGODA_ASSIGN_OR_RETURN(m.file, gguf::GGUFFile::parse(m.bytes.data(), m.bytes.size()));
  return m;
}

// The matrices reading input `which` of `layer` that are quantized to a
// block type, and where scales on that input fold (quant/awq.h); no
// matrices when there are none. *names: theirs, joined by '+'.
Result<AwqGroup> scale_group(F32Model& f32, const ModelConfig& cfg, const ModelShape& shape,
                             const std::map<std::string, const Plan*>& by_name, int32_t layer, LinearInput which,
                             int64_t width, std::string* names) {
  AwqGroup g;
  g.cols = width;
  for (const std::string& name : linear_tensor_names(layer, which, shape.has_output)) {
    auto it = by_name.find(name);
    if (it == by_name.end() || !it->second->quantize || dtype_block_size(it->second->type) == 1) continue;
    g.mats.push_back(f32.tensor(name));
    g.rows.push_back(rows_of(*it->second->src));
    g.types.push_back(it->second->type);
    if (!names->empty()) *names += '+';
    *names += name;
  }
  if (g.mats.empty()) return g;
  const std::string p = "blk." + std::to_string(layer) + ".";
  switch (which) {
    case LinearInput::kAttnQKV: g.norm = f32.tensor(p + "attn_norm.weight"); break;
    case LinearInput::kFfnGateUp: g.norm = f32.tensor(p + cfg.ffn_norm_name + ".weight"); break;
    case LinearInput::kAttnOut:
      g.prev = f32.tensor(p + "attn_v.weight");
      g.prev_cols = cfg.hidden_size;
      g.prev_bias = f32.tensor(p + "attn_v.bias");
      g.share = cfg.num_heads / cfg.num_kv_heads;
      g.head_dim = cfg.head_dim;
      break;
    case LinearInput::kFfnDown:
      g.prev = f32.tensor(p + "ffn_up.weight");
      g.prev_cols = cfg.hidden_size;
      break;
    case LinearInput::kOutput: return AwqGroup{};
  }
  if (!g.norm && !g.prev) return internal_error("no F32 tensor to fold the scales of " + *names + " into");
  return g;
}

// AWQ: one forward pass of the unquantized model collects, per group of
// matrices sharing an input, x x^T and mean |x|; the scales are searched
// there and folded into the in-memory F32 model after the pass (folding
// keeps the unquantized function, so the pass needs no update). Returns
// the folded model; the caller quantizes its matrices.
// SmoothQuant takes the same pass, with per-column max |x| instead, and
// adds the matrices whose input it smoothed to *w8a8.
Result<F32Model> run_scaling(const gguf::GGUFFile& in, const ModelConfig& cfg, const ModelShape& shape,
                             std::vector<Plan>& plans, const QuantizeOptions& opt, ThreadPool& pool,
                             QuantizeReport* report, std::set<std::string>* w8a8) {
  PAGODA_ASSIGN_OR_RETURN(auto tok, Tokenizer::from_gguf(in));
  const int32_t ctx = opt.calib_ctx > 0 ? opt.calib_ctx : std::min(512, std::max(cfg.train_context_len, 2));
  PAGODA_ASSIGN_OR_RETURN(auto windows, calibration_windows(*tok, opt.calib_text, ctx, opt.calib_windows));
  PAGODA_ASSIGN_OR_RETURN(F32Model f32, f32_model(in, plans, true, pool));
  PAGODA_ASSIGN_OR_RETURN(auto model, LlamaModel::load(*f32.file));
  std::map<std::string, const Plan*> by_name;
  for (const Plan& p : plans) by_name[p.src->name] = &p;
  std::vector<std::pair<AwqGroup, std::vector<float>>> folds;
  Status failure = Status::ok();
  auto observer = [&](int32_t layer, LinearInput which, const float* x, int64_t width, int64_t n) {
    if (!failure.is_ok() || which == LinearInput::kOutput) return;
    std::string names;
    auto group = scale_group(f32, cfg, shape, by_name, layer, which, width, &names);
    if (!group.is_ok()) {
      failure = group.status();
      return;
    }
    AwqGroup g = std::move(*group);
    if (g.mats.empty()) return;
    if (opt.method == Method::kSmoothQuant) {
      std::vector<float> act_max(static_cast<size_t>(width), 0.0f);
      for (int64_t t = 0; t < n; ++t)
        for (int64_t c = 0; c < width; ++c) act_max[c] = std::max(act_max[c], std::fabs(x[t * width + c]));
      std::vector<float> scales = smoothquant_scales(g, act_max, opt.smooth_alpha);
      const auto [lo, hi] = std::minmax_element(scales.begin(), scales.end());
      char line[96];
      std::snprintf(line, sizeof(line), ": s in [%.3g, %.3g]", *lo, *hi);
      report->awq_alphas.push_back(names + line);
      if (opt.progress) opt.progress("smoothquant " + names + line);
      for (const std::string& name : linear_tensor_names(layer, which, shape.has_output)) w8a8->insert(name);
      folds.emplace_back(std::move(g), std::move(scales));
      return;
    }
    std::vector<double> h(static_cast<size_t>(width * width), 0.0);
    accumulate_hessian(x, width, n, width, h.data(), pool);
    std::vector<float> mean_abs(static_cast<size_t>(width), 0.0f);
    for (int64_t c = 0; c < width; ++c) {
      double s = 0;
      for (int64_t t = 0; t < n; ++t) s += std::fabs(x[t * width + c]);
      mean_abs[c] = static_cast<float>(s / static_cast<double>(std::max<int64_t>(n, 1)));
    }
    double alpha = 0;
    std::vector<float> scales = awq_search(g, h, mean_abs, opt.awq, pool, &alpha);
    char line[64];
    std::snprintf(line, sizeof(line), ": alpha %.2f", alpha);
    report->awq_alphas.push_back(names + line);
    if (opt.progress) opt.progress("awq " + names + line);
    folds.emplace_back(std::move(g), std::move(scales));
  };
  CalibrationRun run;
  run.threads = opt.threads;
  PAGODA_RETURN_IF_ERROR(run_calibration(std::move(model), windows, observer, run));
  PAGODA_RETURN_IF_ERROR(failure);
  for (const auto& [g, s] : folds) awq_fold(g, s);
  return f32;
}

}  // namespace

Result<QuantizeReport> quantize_model(const std::string& in_path, const std::string& out_path,
                                      const QuantizeOptions& opt) {
  const auto start = Clock::now();
  PAGODA_ASSIGN_OR_RETURN(auto in, gguf::GGUFFile::open(in_path));
  // Only models Pagoda can run: the tensor rules need the architecture.
  PAGODA_ASSIGN_OR_RETURN(ModelConfig cfg, model_config_from_gguf(*in));
  Imatrix imatrix;
  if (!opt.imatrix_path.empty()) {
    PAGODA_ASSIGN_OR_RETURN(imatrix, Imatrix::load(opt.imatrix_path));
    PAGODA_RETURN_IF_ERROR(imatrix.check_against(*in));
  }
  ModelShape shape;
  shape.num_layers = cfg.num_layers;
  shape.has_output = in->tensor("output.weight") != nullptr;
  shape.num_experts = cfg.num_experts;
  shape.has_imatrix = !opt.imatrix_path.empty();
  shape.gqa = cfg.num_kv_heads > 0 ? cfg.num_heads / cfg.num_kv_heads : 1;

  std::vector<Plan> plans;
  plans.reserve(in->tensors().size());
  for (const auto& t : in->tensors()) {
    Plan p;
    p.src = &t;
    p.type = t.type;
    p.in_bytes = t.num_bytes;
    if (is_quantizable(t.name, static_cast<int>(t.dims.size()))) {
      if (!dtype_info(t.type).supported)
        return unimplemented("tensor '" + t.name + "' has type " + std::string(dtype_name(t.type)) +
                             ", which Pagoda cannot read");
      p.type = tensor_type(opt.mix, shape, t.name, t.dims[0]);
      // AWQ and SmoothQuant rescale matrices: every one is written anew.
      p.quantize = p.type != t.type || opt.method == Method::kAwq || opt.method == Method::kSmoothQuant;
    }
    plans.push_back(std::move(p));
  }
  ThreadPool pool(opt.threads > 0 ? opt.threads : default_num_threads());
  QuantizeReport report;
  int32_t done_count = 0;
  auto finish = [&](Plan& p) {
    p.done = true;
    ++done_count;
    if (opt.progress) {
      char line[256];
      std::snprintf(line, sizeof(line), "[%4d/%4zu] %-32s [%s] %s -> %s%s (%.2f s)", done_count, plans.size(),
                    p.src->name.c_str(), dims_str(p.src->dims).c_str(), std::string(dtype_name(p.src->type)).c_str(),
                    std::string(dtype_name(p.type)).c_str(),
                    p.gptq   ? " gptq"
                    : p.w8a8 ? " w8a8"
                             : "",
                    p.seconds);
      opt.progress(line);
    }
  };

  if (opt.method == Method::kGptq) {
    if (opt.calib_text.empty()) return invalid_argument("GPTQ needs calibration text (--calib FILE)");
    if (cfg.num_experts > 0) return unimplemented("GPTQ of MoE models is not supported (use --method rtn)");
    PAGODA_ASSIGN_OR_RETURN(auto tok, Tokenizer::from_gguf(*in));
    const int32_t ctx = opt.calib_ctx > 0 ? opt.calib_ctx : std::min(512, std::max(cfg.train_context_len, 2));
    PAGODA_ASSIGN_OR_RETURN(auto windows, calibration_windows(*tok, opt.calib_text, ctx, opt.calib_windows));
    PAGODA_ASSIGN_OR_RETURN(F32Model f32, f32_model(*in, plans, false, pool));
    PAGODA_ASSIGN_OR_RETURN(auto model, LlamaModel::load(*f32.file));
    std::map<std::string, Plan*> by_name;
    for (Plan& p : plans) by_name[p.src->name] = &p;
    Status failure = Status::ok();
    // Layer by layer as the forward pass reaches it: the inputs of each
    // layer come from the layers before it, already quantized.
    auto observer = [&](int32_t layer, LinearInput which, const float* x, int64_t width, int64_t n) {
      if (!failure.is_ok() || which == LinearInput::kOutput) return;
      // One factor for every weight reading this input (q/k/v, gate/up).
      GptqFactor factor;
      for (const std::string& name : linear_tensor_names(layer, which, shape.has_output)) {
        auto it = by_name.find(name);
        if (it == by_name.end()) continue;
        Plan& p = *it->second;
        if (!p.quantize || !has_block_grid(p.type) || p.src->dims[0] % dtype_block_size(p.type) != 0) continue;
        const auto t0 = Clock::now();
        if (factor.cols == 0) {
          std::vector<double> h(static_cast<size_t>(width * width), 0.0);
          accumulate_hessian(x, width, n, width, h.data(), pool);
          if (Status s = gptq_factor(std::move(h), width, opt.gptq, &factor, pool); !s.is_ok()) {
            failure = Status(s.code(), name + ": " + s.message());
            return;
          }
        }
        GptqOptions g = opt.gptq;
        if (g.importance.empty()) g.importance = imatrix.importance(name);
        float* w = f32.tensor(name);
        const int64_t rows = rows_of(*p.src);
        p.bytes.resize(dtype_row_bytes(p.type, width) * static_cast<size_t>(rows));
        if (Status s = gptq_quantize(p.type, w, rows, factor, g, p.bytes.data(), pool); !s.is_ok()) {
          failure = Status(s.code(), name + ": " + s.message());
          return;
        }
        p.gptq = true;
        p.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
        ++report.num_gptq;
        finish(p);
      }
    };
    CalibrationRun run;
    run.threads = opt.threads;
    PAGODA_RETURN_IF_ERROR(run_calibration(std::move(model), windows, observer, run));
    PAGODA_RETURN_IF_ERROR(failure);
  }

  F32Model awq_model;
  const bool scaling = opt.method == Method::kAwq || opt.method == Method::kSmoothQuant;
  if (opt.method == Method::kSmoothQuant && opt.mix.base != DType::kQ8_0)
    return invalid_argument("SmoothQuant writes W8A8 (Q8_0 rows with one scale each): TYPE must be q8_0, not " +
                            opt.mix.name);
  if (opt.method == Method::kSmoothQuant && !(opt.smooth_alpha >= 0.0f && opt.smooth_alpha <= 1.0f))
    return invalid_argument("--alpha must be in [0, 1]");
  if (scaling) {
    const char* what = opt.method == Method::kAwq ? "AWQ" : "SmoothQuant";
    if (opt.calib_text.empty()) return invalid_argument(std::string(what) + " needs calibration text (--calib FILE)");
    if (cfg.num_experts > 0)
      return unimplemented(std::string(what) + " of MoE models is not supported (use --method rtn)");
    if (!opt.imatrix_path.empty())
      return invalid_argument("--imatrix is for --method rtn or gptq (" + std::string(what) +
                              " rescales the columns it weights)");
    std::set<std::string> w8a8;
    PAGODA_ASSIGN_OR_RETURN(awq_model, run_scaling(*in, cfg, shape, plans, opt, pool, &report, &w8a8));
    for (Plan& p : plans)
      p.w8a8 = p.quantize && p.type == DType::kQ8_0 && w8a8.count(p.src->name) > 0 &&
               p.src->dims[0] <= kernels::cpu::kMaxRowScaledIn;
    // Every tensor now comes from the folded model: the matrices below, the
    // rest (norms, biases) re-encoded in their own type here.
    for (Plan& p : plans) {
      const gguf::TensorInfo* t = awq_model.file->tensor(p.src->name);
      if (!t) return internal_error("AWQ: tensor '" + p.src->name + "' missing from the folded model");
      if (!p.quantize && t->type == DType::kF32 && p.type != DType::kF32) {
        p.bytes.resize(p.src->num_bytes);
        ref::quantize_row(p.type, reinterpret_cast<const float*>(t->data), p.bytes.data(), t->num_elements());
      } else if (!p.quantize) {
        p.bytes.assign(t->data, t->data + t->num_bytes);
      }
      p.src = t;
    }
  }

  for (Plan& p : plans) {
    if (p.done) continue;
    if (p.quantize && p.w8a8) {
      const auto t0 = Clock::now();
      quantize_shared_scale(*p.src, pool, &p.bytes);
      p.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      ++report.num_w8a8;
    } else if (p.quantize) {
      const auto t0 = Clock::now();
      quantize_rtn(*p.src, p.type, imatrix.importance(p.src->name), pool, &p.bytes);
      p.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    }
    finish(p);
  }

  gguf::GGUFWriter w;
  for (const auto& [k, v] : in->metadata())
    if (k != "general.alignment") w.set(k, v);
  if (in->alignment() != 32) w.set_alignment(in->alignment());
  w.set("general.file_type", gguf::Value::make_u32(opt.mix.ftype));
  w.set("general.quantization_version", gguf::Value::make_u32(2));
  if (opt.method == Method::kSmoothQuant) {
    // llama.cpp reads an ordinary Q8_0 file; Pagoda runs the matrices whose
    // rows share one scale as W8A8.
    w.set("pagoda.w8a8", gguf::Value::make_bool(true));
    w.set("pagoda.smoothquant.alpha", gguf::Value::make_f32(opt.smooth_alpha));
  }
  for (const Plan& p : plans) {
    const gguf::TensorInfo& t = *p.src;
    report.bytes_in += p.in_bytes;
    ++report.num_tensors;
    ++report.type_counts[std::string(dtype_name(p.type))];
    if (p.quantize || !p.bytes.empty()) {
      report.num_quantized += p.quantize;
      report.bytes_out += p.bytes.size();
      w.add_tensor(t.name, t.dims, p.type, p.bytes.data(), p.bytes.size());
    } else {
      report.bytes_out += t.num_bytes;
      w.add_tensor(t.name, t.dims, t.type, t.data, t.num_bytes);
    }
  }
  PAGODA_RETURN_IF_ERROR(w.write(out_path));
  report.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return report;
}

}  // namespace pagoda::quant
