// `pagoda quantize IN OUT TYPE` and `pagoda imatrix`: offline quantization
// (quant/). TYPE is a weight type or one of llama.cpp's mixes (Q4_K_M, ...);
// --method gptq runs GPTQ on calibration text, --imatrix weights the
// rounding error by an importance matrix that `pagoda imatrix` collects,
// --method awq scales channels first, --method smoothquant writes W8A8.
#include <cstdio>
#include <string>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "gguf/gguf_file.h"
#include "model/llama_model.h"
#include "quant/calibration.h"
#include "quant/convert_gqa.h"
#include "quant/imatrix.h"
#include "quant/quantize_model.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::cli {

int cmd_quantize(int argc, char** argv) {
  CLI::App app("Quantize a GGUF model (llama.cpp's types and mixes; RTN, imatrix, GPTQ, AWQ, SmoothQuant W8A8)",
               "quantize");
  std::string in, out, type, method = "rtn", imatrix, calib;
  quant::QuantizeOptions opt;
  bool quiet = false;
  app.add_option("input", in, "GGUF model to quantize")->required();
  app.add_option("output", out, "GGUF file to write")->required();
  app.add_option("type", type, "type or mix: " + quant::quant_mix_names())->required();
  app.add_option("--method", method, "rtn (round to nearest), gptq, awq or smoothquant (W8A8; TYPE q8_0)")
      ->check(CLI::IsMember({"rtn", "gptq", "awq", "smoothquant"}))
      ->capture_default_str();
  app.add_option("--imatrix", imatrix, "importance matrix from `pagoda imatrix`");
  app.add_option("--calib", calib, "calibration text file (GPTQ, AWQ, SmoothQuant)");
  app.add_option("--calib-ctx", opt.calib_ctx, "tokens per calibration window (default: min(512, context))")
      ->check(CLI::Range(0, 1 << 16));
  app.add_option("--calib-chunks", opt.calib_windows, "calibration windows")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  app.add_option("--damp", opt.gptq.damp, "GPTQ dampening: fraction of mean(diag H) added to the diagonal")
      ->check(CLI::Range(0.0, 10.0))
      ->capture_default_str();
  app.add_option("--block", opt.gptq.lazy_block, "GPTQ lazy-batch columns")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  // On by default: it lowered KL from the F32 model for every type measured
  // (bench/RESULTS.md, 2026-12-02 13:20).
  opt.gptq.act_order = true;
  app.add_flag("--act-order,!--no-act-order", opt.gptq.act_order,
               "GPTQ: quantize columns in order of decreasing Hessian diagonal (default on)");
  app.add_option("--awq-grid", opt.awq.grid, "AWQ: alpha grid steps over [0, 1]")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--alpha", opt.smooth_alpha, "SmoothQuant: migration strength (0: none, 1: all into the weights)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("-t,--threads", opt.threads, "threads (default: physical cores)")->check(CLI::Range(0, 1024));
  app.add_flag("-q,--quiet", quiet, "no per-tensor lines");
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;

  auto mix = quant::parse_quant_mix(type);
  if (!mix) return fail("quantize", mix.status().message());
  opt.mix = *mix;
  opt.method = method == "gptq"          ? quant::Method::kGptq
               : method == "awq"         ? quant::Method::kAwq
               : method == "smoothquant" ? quant::Method::kSmoothQuant
                                         : quant::Method::kRtn;
  opt.imatrix_path = imatrix;
  if (opt.method != quant::Method::kRtn) {
    if (calib.empty()) return fail("quantize", "--method " + method + " needs --calib FILE");
    if (!read_text_file(calib, &opt.calib_text)) return fail("quantize", "cannot read '" + calib + "'");
  } else if (!calib.empty()) {
    return fail("quantize", "--calib is for --method gptq, awq or smoothquant");
  }
  if (!quiet) opt.progress = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  auto r = quant::quantize_model(in, out, opt);
  if (!r) return fail("quantize", r.status().message());
  std::string types;
  for (const auto& [name, n] : r->type_counts) types += " " + name + ":" + std::to_string(n);
  std::printf("%s: %s -> %s, %.2f MiB -> %.2f MiB, %d tensors (%d quantized, %d by GPTQ, %d W8A8;%s) in %.2f s\n",
              out.c_str(), in.c_str(), opt.mix.name.c_str(), r->bytes_in / 1048576.0, r->bytes_out / 1048576.0,
              r->num_tensors, r->num_quantized, r->num_gptq, r->num_w8a8, types.c_str(), r->seconds);
  return 0;
}

int cmd_imatrix(int argc, char** argv) {
  CLI::App app("Collect an importance matrix (mean squared input per column of every matrix)", "imatrix");
  std::string model = default_model_path(), path, out = "imatrix.gguf";
  int32_t ctx = 0, chunks = 32, threads = 0;
  app.add_option("-m,--model", model, "GGUF model file")->capture_default_str();
  app.add_option("-f,--file", path, "calibration text file")->required();
  app.add_option("-o,--output", out, "imatrix file to write")->capture_default_str();
  app.add_option("-c,--ctx-size", ctx, "tokens per window (default: min(512, context))")->check(CLI::Range(0, 1 << 16));
  app.add_option("--chunks", chunks, "windows to run")->check(CLI::Range(1, 1 << 16))->capture_default_str();
  app.add_option("-t,--threads", threads, "threads (default: physical cores)")->check(CLI::Range(0, 1024));
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;
  std::string text;
  if (!read_text_file(path, &text)) return fail("imatrix", "cannot read '" + path + "'");
  auto file = gguf::GGUFFile::open(model);
  if (!file) return fail("imatrix", file.status().message());
  auto lm = LlamaModel::load(**file);
  if (!lm) return fail("imatrix", lm.status().message());
  auto tok = Tokenizer::from_gguf(**file);
  if (!tok) return fail("imatrix", tok.status().message());
  if (ctx == 0) ctx = std::min(512, std::max(2, (*lm)->config().train_context_len));
  auto windows = quant::calibration_windows(**tok, text, ctx, chunks);
  if (!windows) return fail("imatrix", windows.status().message());
  quant::Imatrix im;
  im.chunk_size = ctx;
  im.chunk_count = static_cast<int32_t>(windows->size());
  im.datasets = {path};
  const bool has_output = (*file)->tensor("output.weight") != nullptr;
  quant::CalibrationRun run;
  run.threads = threads;
  run.observe_output = true;
  run.repack = true;  // the observer only reads
  // MoE experts are not observed (the observer sees dense layers only).
  if (Status s = quant::run_calibration(std::move(*lm), *windows, im.observer(has_output), run); !s.is_ok())
    return fail("imatrix", s.message());
  if (Status s = im.save(out); !s.is_ok()) return fail("imatrix", s.message());
  std::printf("%s: %zu matrices, %d windows of %d tokens\n", out.c_str(), im.entries.size(), im.chunk_count, ctx);
  return 0;
}

int cmd_convert(int argc, char** argv) {
  CLI::App app("Convert a model: MHA -> GQA/MQA by mean-pooling K/V heads", "convert");
  std::string in, out;
  int32_t kv_heads = 0;
  app.add_option("--kv-heads", kv_heads, "KV heads of the converted model (must divide the current count)")
      ->required()
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("input", in, "GGUF model")->required();
  app.add_option("output", out, "GGUF file to write")->required();
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;
  auto r = quant::convert_kv_heads(in, out, kv_heads);
  if (!r) return fail("convert", r.status().message());
  std::printf("%s: %d layers, %d -> %d KV heads\n", out.c_str(), r->num_layers, r->kv_heads_before, r->kv_heads_after);
  return 0;
}

}  // namespace pagoda::cli
