// The shared folder beside the checkout (PAGODA_SHARED_DIR, ../shared: real
// models, vocabularies, chat templates, reference outputs) is not part of the
// repository. Tests that read it skip, saying what is missing, when it is
// absent; a present but unreadable file still fails.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

namespace pagoda::testing_util {

inline std::string shared_path(const std::string& rel_path) { return std::string(PAGODA_SHARED_DIR) + "/" + rel_path; }

inline bool shared_exists(const std::string& rel_path) { return std::filesystem::exists(shared_path(rel_path)); }

}  // namespace pagoda::testing_util

// In a test body (or SetUp): skips the test when shared/<rel_path> is absent.
#define PAGODA_SKIP_WITHOUT_SHARED(rel_path)                                                       \
  do {                                                                                             \
    if (!::pagoda::testing_util::shared_exists(rel_path))                                          \
      GTEST_SKIP() << ::pagoda::testing_util::shared_path(rel_path)                                \
                   << " is absent (the shared models/vocab/templates folder beside the checkout)"; \
  } while (0)
