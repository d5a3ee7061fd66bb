#include "spec/layer_skip.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>

namespace pagoda {

Result<std::vector<int32_t>> parse_skip_layers(std::string_view list, int32_t num_layers) {
  std::vector<int32_t> layers;
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t end = list.find(',', pos);
    if (end == std::string_view::npos) end = list.size();
    std::string_view item = list.substr(pos, end - pos);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    int32_t v = -1;
    const auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || p != item.data() + item.size())
      return invalid_argument("skip layers: '" + std::string(item) + "' is not a layer index (want e.g. 1,3)");
    if (v < 0 || v >= num_layers)
      return invalid_argument("skip layers: layer " + std::to_string(v) + " is out of range (the model has " +
                              std::to_string(num_layers) + " layers)");
    layers.push_back(v);
    pos = end + 1;
  }
  std::sort(layers.begin(), layers.end());
  layers.erase(std::unique(layers.begin(), layers.end()), layers.end());
  if (static_cast<int32_t>(layers.size()) >= num_layers)
    return invalid_argument("skip layers: at least one of the " + std::to_string(num_layers) + " layers must be kept");
  return layers;
}

std::string format_skip_layers(std::span<const int32_t> layers) {
  std::string s;
  for (int32_t l : layers) {
    if (!s.empty()) s.push_back(',');
    s.append(std::to_string(l));
  }
  return s;
}

std::string skip_layers_path(const std::string& model_path) { return model_path + ".skip-layers"; }

Result<std::vector<int32_t>> load_skip_layers(const std::string& path, int32_t num_layers) {
  std::ifstream f(path);
  if (!f) return not_found("cannot read the skip set '" + path + "'");
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    auto layers = parse_skip_layers(line, num_layers);
    if (!layers.is_ok()) return invalid_argument(path + ": " + layers.status().message());
    return layers;
  }
  return invalid_argument(path + ": no skip set in the file");
}

Status save_skip_layers(const std::string& path, std::span<const int32_t> layers, const std::string& comment) {
  std::ofstream f(path);
  std::istringstream lines(comment);
  for (std::string line; std::getline(lines, line);) f << "# " << line << "\n";
  f << format_skip_layers(layers) << "\n";
  f.close();
  if (!f) return internal_error("cannot write '" + path + "'");
  return Status::ok();
}

SkipEstimate estimate_skip_speedup(double agreement, double draft_cost_ratio, const StepCostModel& target,
                                   int32_t max_drafts) {
  const double step = target.seconds(1);
  SkipEstimate best{0.0, 0};
  double expected = 1.0, gain = 1.0;
  for (int32_t k = 1; k <= max_drafts; ++k) {
    gain *= agreement;
    expected += gain;
    const double seconds = target.seconds(1 + k) + k * draft_cost_ratio * step;
    const double speedup = expected / seconds * step;
    if (speedup > best.speedup) best = {speedup, k};
  }
  return best;
}

double agreement_for_speedup(double speedup, double draft_cost_ratio, const StepCostModel& target, int32_t max_drafts) {
  // The estimate grows with agreement: bisect.
  if (estimate_skip_speedup(1.0, draft_cost_ratio, target, max_drafts).speedup < speedup) return 2.0;
  double lo = 0.0, hi = 1.0;
  while (hi - lo > 1e-4) {
    const double mid = 0.5 * (lo + hi);
    (estimate_skip_speedup(mid, draft_cost_ratio, target, max_drafts).speedup < speedup ? lo : hi) = mid;
  }
  return hi;
}

}  // namespace pagoda
