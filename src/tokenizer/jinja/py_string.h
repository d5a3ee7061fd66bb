// Python str semantics over UTF-8 std::string: lengths and indices count code
// points, whitespace is Unicode whitespace.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda::jinja {

// Decodes the code point at s[pos]; sets *len to its byte length. An invalid
// byte decodes as itself (length 1), so every input is walkable.
uint32_t utf8_decode(std::string_view s, size_t pos, size_t* len);
void utf8_append(std::string& out, uint32_t cp);
bool is_py_space(uint32_t cp);

// Byte offset of every code point start, plus s.size() at the end.
std::vector<size_t> code_point_offsets(std::string_view s);
size_t code_point_count(std::string_view s);
std::vector<std::string> code_points(std::string_view s);

// str.strip / lstrip / rstrip; chars == nullopt strips whitespace.
std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// str.split(sep, maxsplit) / rsplit; sep == nullopt splits on whitespace runs.
std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit,
                                  bool from_right);
std::vector<std::string> py_splitlines(std::string_view s);
std::string py_replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count);
int64_t py_find(std::string_view s, std::string_view sub);  // code point index or -1
int64_t py_count(std::string_view s, std::string_view sub);

// Simple one-to-one case mapping for ASCII, Latin-1, Latin Extended-A, Greek
// and Cyrillic; other scripts and multi-character mappings (ß -> SS) are left
// unchanged.
uint32_t cp_upper(uint32_t cp);
uint32_t cp_lower(uint32_t cp);
std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_capitalize(std::string_view s);
std::string py_title(std::string_view s);

// Slice [start:stop:step] with Python's clamping; n = sequence length.
// Returns the selected indices.
std::vector<int64_t> slice_indices(int64_t n, std::optional<int64_t> start, std::optional<int64_t> stop,
                                   std::optional<int64_t> step);

}  // namespace pagoda::jinja
