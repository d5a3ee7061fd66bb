#include "quant/imatrix.h"

#include <cstring>

#include "gguf/gguf_writer.h"
#include "quant/calibration.h"

namespace pagoda::quant {
namespace {

constexpr std::string_view kSum2 = ".in_sum2";
constexpr std::string_view kCounts = ".counts";

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

Status Imatrix::save(const std::string& path) const {
  gguf::GGUFWriter w;
  w.set("general.type", gguf::Value::make_string("imatrix"));
  w.set("imatrix.chunk_count", gguf::Value::make_u32(static_cast<uint32_t>(chunk_count)));
  w.set("imatrix.chunk_size", gguf::Value::make_u32(static_cast<uint32_t>(chunk_size)));
  w.set("imatrix.datasets", gguf::Value::make_string_array(datasets));
  std::vector<float> counts;
  counts.reserve(entries.size());
  for (const auto& [name, e] : entries) counts.push_back(static_cast<float>(e.count));
  size_t i = 0;
  for (const auto& [name, e] : entries) {
    w.add_tensor(name + std::string(kSum2), {static_cast<int64_t>(e.sum2.size())}, DType::kF32, e.sum2.data(),
                 e.sum2.size() * sizeof(float));
    w.add_tensor(name + std::string(kCounts), {1}, DType::kF32, &counts[i++], sizeof(float));
  }
  return w.write(path);
}

Result<Imatrix> Imatrix::load(const std::string& path) {
  PAGODA_ASSIGN_OR_RETURN(auto file, gguf::GGUFFile::open(path));
  if (file->get_string("general.type").value_or("") != "imatrix")
    return invalid_argument("'" + path + "' is not an imatrix file (general.type is not \"imatrix\")");
  Imatrix m;
  m.chunk_count = static_cast<int32_t>(file->get_int("imatrix.chunk_count").value_or(0));
  m.chunk_size = static_cast<int32_t>(file->get_int("imatrix.chunk_size").value_or(0));
  if (const auto* d = file->get_string_array("imatrix.datasets")) m.datasets = *d;
  for (const auto& t : file->tensors()) {
    if (!ends_with(t.name, kSum2)) continue;
    const std::string name = t.name.substr(0, t.name.size() - kSum2.size());
    const auto* c = file->tensor(name + std::string(kCounts));
    if (!c || t.type != DType::kF32 || c->type != DType::kF32 || t.dims.size() != 1 || c->num_elements() < 1)
      return invalid_argument("imatrix '" + path + "': entry '" + name + "' is malformed");
    Entry& e = m.entries[name];
    e.sum2.resize(static_cast<size_t>(t.dims[0]));
    std::memcpy(e.sum2.data(), t.data, e.sum2.size() * sizeof(float));
    float count;
    std::memcpy(&count, c->data, sizeof(float));
    e.count = count;
    for (float v : e.sum2)
      if (!(v >= 0)) return invalid_argument("imatrix '" + path + "': entry '" + name + "' has a negative or NaN sum");
  }
  if (m.entries.empty()) return invalid_argument("imatrix '" + path + "' has no entries");
  return m;
}

Status Imatrix::check_against(const gguf::GGUFFile& model) const {
  for (const auto& [name, e] : entries) {
    const auto* t = model.tensor(name);
    if (!t)
      return invalid_argument("the imatrix has an entry for '" + name +
                              "', which this model lacks: was it made for another model?");
    if (t->dims.size() < 2 || t->dims[0] != static_cast<int64_t>(e.sum2.size()))
      return invalid_argument("the imatrix entry '" + name + "' has " + std::to_string(e.sum2.size()) +
                              " columns, the model's tensor " + std::to_string(t->dims.empty() ? 0 : t->dims[0]) +
                              ": was it made for another model?");
  }
  return Status::ok();
}

std::vector<float> Imatrix::importance(const std::string& tensor) const {
  auto it = entries.find(tensor);
  if (it == entries.end() || it->second.count <= 0) return {};
  std::vector<float> v(it->second.sum2.size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(it->second.sum2[i] / it->second.count);
  return v;
}

LinearObserver Imatrix::observer(bool has_output) {
  return [this, has_output](int32_t layer, LinearInput which, const float* x, int64_t stride, int64_t n) {
    for (const std::string& name : linear_tensor_names(layer, which, has_output)) {
      Entry& e = entries[name];
      if (e.sum2.empty()) e.sum2.assign(static_cast<size_t>(stride), 0.0f);
      // Summed in double per call, then added: the float sums stay exact
      // enough over many calls.
      std::vector<double> acc(e.sum2.size(), 0.0);
      for (int64_t t = 0; t < n; ++t)
        for (size_t i = 0; i < acc.size(); ++i)
          acc[i] +=
              static_cast<double>(x[t * stride + static_cast<int64_t>(i)]) * x[t * stride + static_cast<int64_t>(i)];
      for (size_t i = 0; i < acc.size(); ++i) e.sum2[i] += static_cast<float>(acc[i]);
      e.count += static_cast<double>(n);
    }
  };
}

}  // namespace pagoda::quant
