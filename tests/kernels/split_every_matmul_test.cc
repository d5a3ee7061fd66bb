// The kernel tests run small matrices on 1-3 threads to test how rows are
// split: this binary splits every matmul, however small (the product skips
// the pool below kernels::set_min_parallel_macs' default).
#include <gtest/gtest.h>

#include "kernels/matmul.h"

namespace {

class SplitEveryMatmul : public ::testing::Environment {
 public:
  void SetUp() override { pagoda::kernels::set_min_parallel_macs(0); }
};

const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new SplitEveryMatmul);

}  // namespace
