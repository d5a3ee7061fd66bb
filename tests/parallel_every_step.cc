// The model and engine tests run tiny models on 2 threads to test the
// parallel paths of a step: linked into those two binaries (CMakeLists.txt),
// this gives every step to the pool, however small (the product runs a small
// model's small steps on the calling thread:
// LlamaModel::set_min_parallel_step_macs).
#include <gtest/gtest.h>

#include "model/llama_model.h"

namespace {

class ParallelEveryStep : public ::testing::Environment {
 public:
  void SetUp() override { pagoda::LlamaModel::set_min_parallel_step_macs(0); }
};

const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new ParallelEveryStep);

}  // namespace
