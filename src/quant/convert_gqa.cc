#include "quant/convert_gqa.h"

#include <vector>

#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "kernels/ref/quant_ref.h"
#include "model/model_config.h"

namespace pagoda::quant {

Result<ConvertReport> convert_kv_heads(const std::string& in_path, const std::string& out_path, int32_t kv_heads) {
  PAGODA_ASSIGN_OR_RETURN(auto in, gguf::GGUFFile::open(in_path));
  PAGODA_ASSIGN_OR_RETURN(ModelConfig cfg, model_config_from_gguf(*in));
  if (kv_heads < 1 || cfg.num_kv_heads % kv_heads != 0)
    return invalid_argument("--kv-heads " + std::to_string(kv_heads) + " must divide the model's " +
                            std::to_string(cfg.num_kv_heads) + " KV heads");
  const auto arch = in->get_string("general.architecture");
  const int32_t group = cfg.num_kv_heads / kv_heads;
  const int64_t hd = cfg.head_dim;
  gguf::GGUFWriter w;
  for (const auto& [k, v] : in->metadata())
    if (k != "general.alignment") w.set(k, v);
  if (in->alignment() != 32) w.set_alignment(in->alignment());
  w.set(*arch + ".attention.head_count_kv", gguf::Value::make_u32(static_cast<uint32_t>(kv_heads)));
  std::vector<std::vector<uint8_t>> owned;
  owned.reserve(in->tensors().size());
  auto is_kv = [](const std::string& name) {
    for (const char* s : {".attn_k.weight", ".attn_v.weight", ".attn_k.bias", ".attn_v.bias"})
      if (name.size() > std::string(s).size() &&
          name.compare(name.size() - std::string(s).size(), std::string::npos, s) == 0)
        return true;
    return false;
  };
  for (const auto& t : in->tensors()) {
    if (group == 1 || !is_kv(t.name)) {
      w.add_tensor(t.name, t.dims, t.type, t.data, t.num_bytes);
      continue;
    }
    if (!dtype_info(t.type).supported)
      return unimplemented("tensor '" + t.name + "' has type " + std::string(dtype_name(t.type)) +
                           ", which Pagoda cannot read");
    // A bias is one row of kv_dim values; a weight kv_dim rows of `cols`.
    const bool bias = t.dims.size() == 1;
    const int64_t cols = bias ? 1 : t.dims[0];
    const int64_t rows = bias ? t.dims[0] : t.dims[1];
    if (rows != cfg.num_kv_heads * hd)
      return invalid_argument("tensor '" + t.name + "' does not have head_count_kv * head_dim rows");
    std::vector<float> src(static_cast<size_t>(rows * cols)), dst(static_cast<size_t>(kv_heads * hd * cols), 0.0f);
    if (bias) {
      ref::dequantize_row(t.type, t.data, src.data(), rows);
    } else {
      const size_t rb = dtype_row_bytes(t.type, cols);
      for (int64_t r = 0; r < rows; ++r) ref::dequantize_row(t.type, t.data + r * rb, &src[r * cols], cols);
    }
    for (int64_t g = 0; g < kv_heads; ++g)
      for (int64_t j = 0; j < group; ++j)
        for (int64_t d = 0; d < hd; ++d) {
          const float* s = &src[((g * group + j) * hd + d) * cols];
          float* o = &dst[(g * hd + d) * cols];
          for (int64_t c = 0; c < cols; ++c) o[c] += s[c] / static_cast<float>(group);
        }
    std::vector<int64_t> dims = t.dims;
    dims[bias ? 0 : 1] = kv_heads * hd;
    auto& bytes = owned.emplace_back();
    if (bias) {
      bytes.resize(dtype_row_bytes(t.type, kv_heads * hd));
      ref::quantize_row(t.type, dst.data(), bytes.data(), kv_heads * hd);
    } else {
      const size_t rb = dtype_row_bytes(t.type, cols);
      bytes.resize(rb * static_cast<size_t>(kv_heads * hd));
      for (int64_t r = 0; r < kv_heads * hd; ++r)
        ref::quantize_row(t.type, &dst[r * cols], bytes.data() + r * rb, cols);
    }
    w.add_tensor(t.name, dims, t.type, bytes.data(), bytes.size());
  }
  PAGODA_RETURN_IF_ERROR(w.write(out_path));
  return ConvertReport{cfg.num_kv_heads, kv_heads, cfg.num_layers};
}

}  // namespace pagoda::quant
