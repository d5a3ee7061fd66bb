// Self-speculative decoding's skip set (Draft & Verify, Zhang et al. 2024;
// LayerSkip, Elhoushi et al. 2024): which layers the target skips to draft
// for itself. Stored as text beside the model (FILE.skip-layers, found
// automatically) by `pagoda spec tune-skip`, which picks the set that
// maximizes the speed-up this header estimates.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "spec/draft_planner.h"

namespace pagoda {

// "1,3,4" (0-based layer indices, any order) -> sorted, unique indices in
// [0, num_layers), at least one layer left to run; a clear error otherwise.
Result<std::vector<int32_t>> parse_skip_layers(std::string_view list, int32_t num_layers);
std::string format_skip_layers(std::span<const int32_t> layers);  // "1,3,4"

// Where the skip set of the model at `model_path` is looked for.
std::string skip_layers_path(const std::string& model_path);
// The file's first line that is not empty or a '#' comment, parsed.
Result<std::vector<int32_t>> load_skip_layers(const std::string& path, int32_t num_layers);
Status save_skip_layers(const std::string& path, std::span<const int32_t> layers, const std::string& comment);

struct SkipEstimate {
  double speedup = 0.0;  // tokens per second over plain decoding (< 1: a slow-down)
  int32_t num_drafts = 0;
};
// Batch-1 speed-up of drafting k tokens (the best 1 <= k <= max_drafts) when each
// draft matches the target with probability `agreement` (runs stop at the
// first miss), a draft forward costs `draft_cost_ratio` of a one-token
// target step, and verifying n tokens costs target.seconds(n).
SkipEstimate estimate_skip_speedup(double agreement, double draft_cost_ratio, const StepCostModel& target,
                                   int32_t max_drafts);

// The least agreement at which estimate_skip_speedup reaches `speedup` (to
// within 1e-4), or a value above 1 when no agreement does: what a skip set
// of this cost would have to match to pay that much.
double agreement_for_speedup(double speedup, double draft_cost_ratio, const StepCostModel& target, int32_t max_drafts);

}  // namespace pagoda
