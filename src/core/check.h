// Internal invariant checks. PAGODA_CHECK is always on; PAGODA_DCHECK only in
// debug builds (hot paths). Never use these for input a user can cause.
#pragma once

#include <cstdio>
#include <cstdlib>

#define PAGODA_CHECK(cond)                                                          \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                 \
    }                                                                               \
  } while (0)

#ifdef NDEBUG
#define PAGODA_DCHECK(cond) \
  do {                      \
  } while (0)
#else
#define PAGODA_DCHECK(cond) PAGODA_CHECK(cond)
#endif
