// The skip set of self-speculative decoding: parsing (every bad list is a
// clear error), the file beside the model, and the speed-up estimate
// tune-skip ranks sets by.
#include "spec/layer_skip.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace pagoda {
namespace {

TEST(SkipLayers, ParsesSortsAndDeduplicates) {
  auto l = parse_skip_layers("3, 1,3", 5);
  ASSERT_TRUE(l.is_ok()) << l.status().message();
  EXPECT_EQ(*l, (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(format_skip_layers(*l), "1,3");
  for (const char* bad : {"", "5", "-1", "a", "1,,2", "1;2", "0,1,2,3,4", "1.5"}) {
    auto r = parse_skip_layers(bad, 5);
    EXPECT_FALSE(r.is_ok()) << "'" << bad << "'";
    if (!r.is_ok()) {
      EXPECT_NE(r.status().message().find("skip layers"), std::string::npos);
    }
  }
}

TEST(SkipLayers, FileRoundTripSkipsComments) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("pagoda_skip_" + std::to_string(::getpid()))).string();
  const std::vector<int32_t> layers = {0, 2};
  ASSERT_TRUE(save_skip_layers(path, layers, "two lines\nof comment").is_ok());
  auto back = load_skip_layers(path, 4);
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(*back, layers);
  EXPECT_FALSE(load_skip_layers(path, 2).is_ok());  // layer 2 of a 2-layer model
  { std::ofstream(path) << "# only a comment\n"; }
  EXPECT_FALSE(load_skip_layers(path, 4).is_ok());
  std::filesystem::remove(path);
  EXPECT_FALSE(load_skip_layers(path, 4).is_ok());
  EXPECT_EQ(skip_layers_path("/m/x.gguf"), "/m/x.gguf.skip-layers");
}

TEST(SkipLayers, EstimateFollowsAgreementAndCost) {
  // Free verification, a draft at 30% of a step: 90% agreement pays (k > 1),
  // more agreement pays more, a dearer draft pays less, no agreement loses.
  const StepCostModel flat({{1, 1e-3}, {64, 1e-3}});
  const SkipEstimate good = estimate_skip_speedup(0.9, 0.3, flat, 8);
  EXPECT_GT(good.speedup, 1.5);
  EXPECT_GT(good.num_drafts, 1);
  EXPECT_GT(estimate_skip_speedup(0.95, 0.3, flat, 8).speedup, good.speedup);
  EXPECT_LT(estimate_skip_speedup(0.9, 0.6, flat, 8).speedup, good.speedup);
  EXPECT_LT(estimate_skip_speedup(0.0, 0.3, flat, 8).speedup, 1.0);
  // k = 1 exactly: (1 + a) / (1 + c) of a step when verifying 2 costs 1.
  EXPECT_NEAR(estimate_skip_speedup(0.5, 0.5, flat, 1).speedup, 1.0, 1e-9);
  // Compute-bound verification: nothing pays.
  const StepCostModel linear({{1, 1e-3}, {64, 64e-3}});
  EXPECT_LT(estimate_skip_speedup(0.9, 0.3, linear, 8).speedup, 1.0);
}

TEST(SkipLayers, AgreementForSpeedupIsTheEstimatesInverse) {
  const StepCostModel flat({{1, 1e-3}, {64, 1e-3}});
  // k = 1 with verification free: (1 + a) / (1 + c) = 1.2 at c = 0.5 needs a = 0.8.
  EXPECT_NEAR(agreement_for_speedup(1.2, 0.5, flat, 1), 0.8, 1e-3);
  for (double c : {0.1, 0.3, 0.7}) {
    for (double target : {1.0, 1.2, 1.5}) {
      const double a = agreement_for_speedup(target, c, flat, 8);
      if (a > 1.0) {
        EXPECT_LT(estimate_skip_speedup(1.0, c, flat, 8).speedup, target) << c << " " << target;
        continue;
      }
      EXPECT_GE(estimate_skip_speedup(a, c, flat, 8).speedup, target - 1e-9) << c << " " << target;
      EXPECT_LT(estimate_skip_speedup(a - 2e-3, c, flat, 8).speedup, target) << c << " " << target;
    }
  }
  // A dearer draft must match more; with verification costing a step per
  // token no agreement reaches 1.2x.
  EXPECT_GT(agreement_for_speedup(1.2, 0.7, flat, 8), agreement_for_speedup(1.2, 0.3, flat, 8));
  const StepCostModel linear({{1, 1e-3}, {64, 64e-3}});
  EXPECT_GT(agreement_for_speedup(1.2, 0.3, linear, 8), 1.0);
}

}  // namespace
}  // namespace pagoda
