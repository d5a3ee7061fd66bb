// Files are mapped, not read: if a model file is truncated or replaced while
// the process runs, touching a page past the new end raises SIGBUS. The guard
// turns that fault, when it hits a registered mapping, into one clear log
// line and exit status 70 (EX_SOFTWARE) instead of a bare "Bus error": the
// weights are gone, so the process cannot go on serving. Faults anywhere else
// keep the default action.
#pragma once

#include <cstddef>
#include <string>

namespace pagoda::gguf {

inline constexpr int kTruncatedFileExitCode = 70;

// Installs the SIGBUS handler (once; call it early in main).
void install_mapping_guard();
// Registers / forgets a mapping (GGUFFile does both). Thread-safe; a fixed
// number of slots (extra mappings go unguarded).
void register_mapping(const void* base, size_t size, const std::string& path);
void unregister_mapping(const void* base);

}  // namespace pagoda::gguf
