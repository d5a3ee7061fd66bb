// What kind of build the tests run in. Sanitizers slow code down several
// times and change memory use (ASan's quarantine keeps freed memory), so
// wall-clock bounds scale by kTimeScale and RSS checks are skipped there.
#pragma once

namespace pagoda::testing_util {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

// Sanitized builds are also unoptimized outside the kernels (CMakeLists.txt).
inline constexpr double kTimeScale = kSanitized ? 10.0 : 1.0;

}  // namespace pagoda::testing_util
