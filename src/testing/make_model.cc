#include "testing/make_model.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <set>
#include <tuple>

#include "core/fp16.h"
#include "core/thread_pool.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "kernels/ref/quant_ref.h"
#include "testing/builtin_vocab.h"

namespace pagoda {
namespace {

using gguf::Value;

struct Preset {
  const char* name;
  int32_t num_layers, hidden_size, num_heads, num_kv_heads, ffn_size, vocab_size, train_context_len;
};

constexpr Preset kPresets[] = {
    {"tiny", 2, 64, 4, 2, 128, 512, 512},
    {"tiny-mha", 2, 64, 4, 4, 128, 512, 512},
    {"110m", 12, 768, 12, 12, 2048, 32000, 2048},
    {"tinyllama-1.1b", 22, 2048, 32, 4, 5632, 32000, 2048},
};

constexpr DType kMakeModelDTypes[] = {
    DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1,
    DType::kQ5_0, DType::kQ5_1, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K,
};

bool is_quantized(DType t) { return dtype_block_size(t) > 1; }

// llama.cpp keeps the output projection at higher precision for 4/5-bit types.
DType output_type(DType t) {
  switch (t) {
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ4_K:
    case DType::kQ5_K: return DType::kQ6_K;
    default: return t;
  }
}

int64_t head_dim_of(const ModelConfig& s) { return s.num_heads > 0 ? s.hidden_size / s.num_heads : 0; }

Status validate_shape(const ModelConfig& s) {
  if (s.arch != "llama" && s.arch != "qwen2") {
    return invalid_argument("unknown architecture '" + s.arch + "' (supported: llama, qwen2)");
  }
  struct Limit {
    const char* name;
    int64_t value, max;
  };
  const Limit limits[] = {
      {"num_layers", s.num_layers, 1024},
      {"hidden_size", s.hidden_size, 65536},
      {"num_heads", s.num_heads, 4096},
      {"num_kv_heads", s.num_kv_heads, 4096},
      {"ffn_size", s.ffn_size, 1 << 20},
      {"vocab_size", s.vocab_size, 1 << 22},
      {"train_context_len", s.train_context_len, 1 << 24},
  };
  for (const auto& l : limits) {
    if (l.value < 1 || l.value > l.max) {
      return invalid_argument(std::string(l.name) + " must be in [1, " + std::to_string(l.max) + "], got " +
                              std::to_string(l.value));
    }
  }
  if (s.hidden_size % s.num_heads != 0) {
    return invalid_argument("hidden_size (" + std::to_string(s.hidden_size) + ") must be a multiple of num_heads (" +
                            std::to_string(s.num_heads) + ")");
  }
  if (head_dim_of(s) % 2 != 0) {
    return invalid_argument("head dim hidden_size / num_heads = " + std::to_string(head_dim_of(s)) +
                            " must be even (RoPE rotates pairs)");
  }
  if (s.num_heads % s.num_kv_heads != 0) {
    return invalid_argument("num_heads (" + std::to_string(s.num_heads) + ") must be a multiple of num_kv_heads (" +
                            std::to_string(s.num_kv_heads) + ")");
  }
  if (!(s.rope_freq_base > 0) || !(s.rms_eps > 0)) {
    return invalid_argument("rope base and rms eps must be positive");
  }
  return Status::ok();
}

// Tensor kinds that share a fallback get one note: "blk.3.ffn_down.weight"
// counts under "ffn_down.weight".
std::string tensor_kind(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return name;
  const size_t dot = name.find('.', 4);
  return dot == std::string::npos ? name : name.substr(dot + 1);
}

class PlanBuilder {
 public:
  void add(std::string name, std::vector<int64_t> dims, DType want, double mean, double stddev) {
    const DType type = fit_type(name, want, dims[0]);
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    plan_.num_params += n;
    plan_.num_bytes += dtype_row_bytes(type, dims[0]) * static_cast<uint64_t>(n / dims[0]);
    plan_.tensors.push_back({std::move(name), std::move(dims), type, mean, stddev});
  }

  ModelPlan finish() {
    for (const auto& [key, fb] : fallbacks_) {
      const auto& [row, want, got] = key;
      std::string kinds;
      for (const auto& k : fb.kinds) {
        if (!kinds.empty()) kinds += ", ";
        kinds += k;
      }
      plan_.notes.push_back("rows of " + std::to_string(row) + " are not a multiple of " +
                            std::to_string(dtype_block_size(want)) + ": " + std::to_string(fb.count) +
                            (fb.count == 1 ? " tensor uses " : " tensors use ") + std::string(dtype_name(got)) +
                            " instead of " + std::string(dtype_name(want)) + " (" + kinds + ")");
    }
    return std::move(plan_);
  }

 private:
  struct Fallback {
    std::set<std::string> kinds;
    int count = 0;
  };
  using FallbackKey = std::tuple<int64_t, DType, DType>;  // row length, wanted, used

  DType fit_type(const std::string& name, DType want, int64_t row) {
    if (row % dtype_block_size(want) == 0) return want;
    DType got = DType::kF16;
    if (dtype_block_size(want) == kQK_K && row % dtype_block_size(DType::kQ8_0) == 0) got = DType::kQ8_0;
    Fallback& fb = fallbacks_[FallbackKey{row, want, got}];
    fb.kinds.insert(tensor_kind(name));
    ++fb.count;
    return got;
  }

  ModelPlan plan_;
  std::map<FallbackKey, Fallback> fallbacks_;
};

// --- weights -----------------------------------------------------------

uint64_t mix64(uint64_t z) {  // splitmix64's finalizer
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// mean + stddev * (approximately standard normal): the sum of the four
// 16-bit lanes of one splitmix64 output (Irwin-Hall, bounded to +-3.46
// sigma), about 1 ns per element. Each row has its own stream, so the
// output does not depend on the number of threads.
void fill_row(float* dst, int64_t n, uint64_t row_seed, double mean, double stddev) {
  static const double kInvSd = 1.0 / std::sqrt((65536.0 * 65536.0 - 1.0) / 3.0);
  const float scale = static_cast<float>(stddev * kInvSd);
  const float m = static_cast<float>(mean);
  uint64_t s = row_seed;
  for (int64_t i = 0; i < n; ++i) {
    s += 0x9E3779B97F4A7C15ull;
    const uint64_t z = mix64(s);
    const int64_t sum =
        static_cast<int64_t>((z & 0xffff) + ((z >> 16) & 0xffff) + ((z >> 32) & 0xffff) + (z >> 48)) - 131070;
    dst[i] = m + scale * static_cast<float>(sum);
  }
}

void encode_row(DType type, const float* src, void* dst, int64_t n) {
  switch (type) {
    case DType::kF32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); break;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = fp32_to_fp16(src[i]);
      break;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = fp32_to_bf16(src[i]);
      break;
    default: ref::quantize_row(type, src, dst, n);
  }
}

struct TensorBytes {
  std::unique_ptr<uint8_t[]> data;
  size_t size = 0;
};

TensorBytes generate_tensor(const PlannedTensor& t, uint64_t seed, ThreadPool& pool) {
  const int64_t row = t.dims[0];
  int64_t rows = 1;
  for (size_t k = 1; k < t.dims.size(); ++k) rows *= t.dims[k];
  const size_t row_bytes = dtype_row_bytes(t.type, row);
  TensorBytes out;
  out.size = row_bytes * static_cast<size_t>(rows);
  out.data.reset(new uint8_t[out.size]);
  const uint64_t tensor_seed = mix64(seed ^ fnv1a(t.name));
  pool.parallel_for(rows, [&](int64_t begin, int64_t end) {
    std::vector<float> scratch(static_cast<size_t>(row));
    for (int64_t r = begin; r < end; ++r) {
      fill_row(scratch.data(), row, mix64(tensor_seed + static_cast<uint64_t>(r) * 0xD1B54A32D192ED03ull), t.mean,
               t.stddev);
      encode_row(t.type, scratch.data(), out.data.get() + row_bytes * static_cast<size_t>(r), row);
    }
  });
  return out;
}

// --- metadata ----------------------------------------------------------

void set_hparams(const ModelConfig& s, const MakeModelOptions& opts, gguf::GGUFWriter& w) {
  auto u32 = [](int64_t v) { return Value::make_u32(static_cast<uint32_t>(v)); };
  w.set("general.architecture", Value::make_string(s.arch));
  w.set("general.name", Value::make_string(opts.name));
  w.set("general.file_type", Value::make_u32(llama_file_type(opts.dtype)));
  if (is_quantized(opts.dtype)) w.set("general.quantization_version", Value::make_u32(2));
  const std::string p = s.arch + ".";
  w.set(p + "vocab_size", u32(s.vocab_size));
  w.set(p + "context_length", u32(s.train_context_len));
  w.set(p + "embedding_length", u32(s.hidden_size));
  w.set(p + "block_count", u32(s.num_layers));
  w.set(p + "feed_forward_length", u32(s.ffn_size));
  w.set(p + "attention.head_count", u32(s.num_heads));
  w.set(p + "attention.head_count_kv", u32(s.num_kv_heads));
  w.set(p + "attention.key_length", u32(head_dim_of(s)));
  w.set(p + "attention.value_length", u32(head_dim_of(s)));
  w.set(p + "rope.dimension_count", u32(head_dim_of(s)));
  w.set(p + "rope.freq_base", Value::make_f32(static_cast<float>(s.rope_freq_base)));
  w.set(p + "attention.layer_norm_rms_epsilon", Value::make_f32(static_cast<float>(s.rms_eps)));
}

void set_builtin_vocab(BuiltinVocab vocab, gguf::GGUFWriter& w) {
  w.set("tokenizer.ggml.model", Value::make_string("gpt2"));
  w.set("tokenizer.ggml.pre", Value::make_string("gpt-2"));
  w.set("tokenizer.ggml.tokens", Value::make_string_array(std::move(vocab.tokens)));
  w.set("tokenizer.ggml.token_type", Value::make_i32_array(std::move(vocab.token_types)));
  w.set("tokenizer.ggml.merges", Value::make_string_array(std::move(vocab.merges)));
  w.set("tokenizer.ggml.bos_token_id", Value::make_u32(static_cast<uint32_t>(vocab.bos_id)));
  w.set("tokenizer.ggml.eos_token_id", Value::make_u32(static_cast<uint32_t>(vocab.eos_id)));
  w.set("tokenizer.ggml.unknown_token_id", Value::make_u32(static_cast<uint32_t>(vocab.unk_id)));
  w.set("tokenizer.ggml.add_bos_token", Value::make_bool(true));
  w.set("tokenizer.ggml.add_eos_token", Value::make_bool(false));
}

// The writer renames a temporary file over `path`: fail early, before minutes
// of work, when that cannot succeed.
Status check_writable(const std::string& path) {
  if (path.empty()) return invalid_argument("no output file given");
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return invalid_argument("cannot write '" + path + "': it is a directory");
  }
  const std::string probe = path + ".probe." + std::to_string(::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return invalid_argument("cannot write '" + path + "': " + std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
  return Status::ok();
}

}  // namespace

Result<ModelConfig> model_preset(std::string_view name) {
  for (const auto& p : kPresets) {
    if (name != p.name) continue;
    ModelConfig s;
    s.arch = "llama";
    s.num_layers = p.num_layers;
    s.hidden_size = p.hidden_size;
    s.num_heads = p.num_heads;
    s.num_kv_heads = p.num_kv_heads;
    s.ffn_size = p.ffn_size;
    s.vocab_size = p.vocab_size;
    s.train_context_len = p.train_context_len;
    s.head_dim = p.hidden_size / p.num_heads;
    s.rope_dim = s.head_dim;
    return s;
  }
  std::string names;
  for (const auto& n : model_preset_names()) {
    if (!names.empty()) names += ", ";
    names += n;
  }
  return invalid_argument("unknown preset '" + std::string(name) + "' (presets: " + names + ")");
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const auto& p : kPresets) names.emplace_back(p.name);
  return names;
}

Status set_model_arch(ModelConfig* shape, std::string_view arch) {
  if (arch == "llama") {
    shape->rms_eps = 1e-5f;
    shape->rope_style = kernels::RopeStyle::kInterleaved;
    shape->has_qkv_bias = false;
  } else if (arch == "qwen2") {
    shape->rms_eps = 1e-6f;
    shape->rope_freq_base = 1e6f;
    shape->rope_style = kernels::RopeStyle::kHalfSplit;
    shape->has_qkv_bias = true;
  } else {
    return invalid_argument("unknown architecture '" + std::string(arch) + "' (supported: llama, qwen2)");
  }
  shape->arch = std::string(arch);
  return Status::ok();
}

Result<DType> make_model_dtype(std::string_view name) {
  const auto t = dtype_from_name(name);
  for (DType ok : kMakeModelDTypes) {
    if (t && *t == ok) return ok;
  }
  std::string names;
  for (DType ok : kMakeModelDTypes) {
    if (!names.empty()) names += ' ';
    names += dtype_name(ok);
  }
  return invalid_argument("unsupported dtype '" + std::string(name) + "' (choose one of: " + names + ")");
}

uint32_t llama_file_type(DType t) {
  switch (t) {
    case DType::kF32: return 0;
    case DType::kF16: return 1;
    case DType::kQ4_0: return 2;
    case DType::kQ4_1: return 3;
    case DType::kQ8_0: return 7;
    case DType::kQ5_0: return 8;
    case DType::kQ5_1: return 9;
    case DType::kQ4_K: return 15;  // Q4_K_M
    case DType::kQ5_K: return 17;  // Q5_K_M
    case DType::kQ6_K: return 18;
    case DType::kBF16: return 32;
    default: return 0;
  }
}

Result<ModelPlan> plan_model(const ModelConfig& s, DType dtype, bool tied_embeddings) {
  PAGODA_RETURN_IF_ERROR(validate_shape(s));
  PAGODA_ASSIGN_OR_RETURN(DType checked, make_model_dtype(dtype_name(dtype)));
  const int64_t hd = head_dim_of(s), q_dim = s.num_heads * hd, kv_dim = s.num_kv_heads * hd;
  const double in_std = 1.0 / std::sqrt(static_cast<double>(s.hidden_size));
  // Residual branches are scaled down so the stream stays O(1) over num_layers.
  const double depth = 1.0 / std::sqrt(2.0 * static_cast<double>(s.num_layers));
  PlanBuilder b;
  b.add("token_embd.weight", {s.hidden_size, s.vocab_size}, checked, 0, 0.02);
  for (int64_t i = 0; i < s.num_layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    b.add(p + "attn_norm.weight", {s.hidden_size}, DType::kF32, 1, 0.02);
    b.add(p + "attn_q.weight", {s.hidden_size, q_dim}, checked, 0, in_std);
    b.add(p + "attn_k.weight", {s.hidden_size, kv_dim}, checked, 0, in_std);
    b.add(p + "attn_v.weight", {s.hidden_size, kv_dim}, checked, 0, in_std);
    if (s.arch == "qwen2") {
      b.add(p + "attn_q.bias", {q_dim}, DType::kF32, 0, 0.02);
      b.add(p + "attn_k.bias", {kv_dim}, DType::kF32, 0, 0.02);
      b.add(p + "attn_v.bias", {kv_dim}, DType::kF32, 0, 0.02);
    }
    b.add(p + "attn_output.weight", {q_dim, s.hidden_size}, checked, 0, depth / std::sqrt(static_cast<double>(q_dim)));
    b.add(p + "ffn_norm.weight", {s.hidden_size}, DType::kF32, 1, 0.02);
    b.add(p + "ffn_gate.weight", {s.hidden_size, s.ffn_size}, checked, 0, in_std);
    b.add(p + "ffn_up.weight", {s.hidden_size, s.ffn_size}, checked, 0, in_std);
    b.add(p + "ffn_down.weight", {s.ffn_size, s.hidden_size}, checked, 0,
          depth / std::sqrt(static_cast<double>(s.ffn_size)));
  }
  b.add("output_norm.weight", {s.hidden_size}, DType::kF32, 1, 0.02);
  if (!tied_embeddings) b.add("output.weight", {s.hidden_size, s.vocab_size}, output_type(checked), 0, in_std);
  return b.finish();
}

Result<ModelPlan> make_model(const MakeModelOptions& opts, const std::string& path) {
  ModelConfig shape = opts.config;
  gguf::GGUFWriter writer;
  std::unique_ptr<gguf::GGUFFile> vocab_file;
  if (!opts.vocab_from.empty()) {
    auto f = gguf::GGUFFile::open(opts.vocab_from);
    if (!f.is_ok()) return Status(f.status().code(), "--vocab-from: " + f.status().message());
    vocab_file = std::move(f).value();
    const auto* tokens = vocab_file->get_string_array("tokenizer.ggml.tokens");
    if (!tokens || tokens->empty()) {
      return invalid_argument("--vocab-from: '" + opts.vocab_from + "' has no tokenizer.ggml.tokens");
    }
    if (tokens->size() > (1u << 22)) return invalid_argument("--vocab-from: the vocabulary is too large");
    shape.vocab_size = static_cast<int32_t>(tokens->size());
  }
  PAGODA_ASSIGN_OR_RETURN(ModelPlan plan, plan_model(shape, opts.dtype, opts.tied_embeddings));
  set_hparams(shape, opts, writer);
  if (vocab_file) {
    for (const auto& [key, value] : vocab_file->metadata()) {
      if (key.rfind("tokenizer.", 0) == 0) writer.set(key, value);
    }
  } else {
    PAGODA_ASSIGN_OR_RETURN(BuiltinVocab vocab, make_builtin_vocab(shape.vocab_size));
    set_builtin_vocab(std::move(vocab), writer);
  }
  PAGODA_RETURN_IF_ERROR(check_writable(path));

  std::vector<TensorBytes> data;
  data.reserve(plan.tensors.size());
  try {
    ThreadPool pool(opts.num_threads > 0 ? opts.num_threads : default_num_threads());
    for (const auto& t : plan.tensors) {
      data.push_back(generate_tensor(t, opts.seed, pool));
      writer.add_tensor(t.name, t.dims, t.type, data.back().data.get(), data.back().size);
    }
  } catch (const std::bad_alloc&) {
    return resource_exhausted("out of memory holding " + std::to_string(plan.num_bytes >> 20) + " MiB of weights");
  }
  PAGODA_RETURN_IF_ERROR(writer.write(path));
  return plan;
}

}  // namespace pagoda
