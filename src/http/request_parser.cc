#include "http/request_parser.h"

#include <algorithm>

namespace pagoda::http {

namespace {

constexpr size_t kMaxTargetBytes = 16 << 10;
constexpr size_t kMaxChunkLineBytes = 1024;

bool is_tchar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  switch (c) {
    case '!':
    case '#':
    case '$':
    case '%':
    case '&':
    case '\'':
    case '*':
    case '+':  // clang-format off
    case '-': case '.': case '^': case '_': case '`': case '|': case '~': return true;  // clang-format on
    default: return false;
  }
}

bool is_token(std::string_view s) { return !s.empty() && std::all_of(s.begin(), s.end(), is_tchar); }

char lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

std::string to_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = lower(c);
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Comma-separated list elements, trimmed, empty ones skipped.
std::vector<std::string_view> split_list(std::string_view v) {
  std::vector<std::string_view> out;
  while (!v.empty()) {
    const size_t comma = v.find(',');
    std::string_view item = trim(v.substr(0, comma));
    if (!item.empty()) out.push_back(item);
    if (comma == std::string_view::npos) break;
    v.remove_prefix(comma + 1);
  }
  return out;
}

bool equals_ci(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (lower(a[i]) != lower(b[i])) return false;
  return true;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

const std::string* Request::header(std::string_view lower_name) const {
  for (const Header& h : headers)
    if (h.name == lower_name) return &h.value;
  return nullptr;
}

bool parse_content_length(std::string_view value, uint64_t* out) {
  const std::vector<std::string_view> items = split_list(value);
  if (items.empty()) return false;
  uint64_t first = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    std::string_view s = items[i];
    if (s.size() > 18) return false;
    uint64_t v = 0;
    for (char c : s) {
      if (c < '0' || c > '9') return false;
      v = v * 10 + static_cast<uint64_t>(c - '0');
    }
    if (i == 0) first = v;
    if (v != first) return false;
  }
  *out = first;
  return true;
}

void RequestParser::reset() {
  phase_ = Phase::kHead;
  started_ = false;
  req_ = Request{};
  head_.clear();
  head_scan_ = 0;
  remaining_ = 0;
  trailer_bytes_ = 0;
  error_status_ = 0;
  error_message_.clear();
}

RequestParser::State RequestParser::fail(int status, std::string message) {
  phase_ = Phase::kError;
  error_status_ = status;
  error_message_ = std::move(message);
  return State::kError;
}

bool RequestParser::parse_request_line(std::string_view line) {
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos) {
    fail(400, "malformed request line");
    return false;
  }
  const std::string_view method = line.substr(0, sp1);
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (!is_token(method) || method.size() > 32) {
    fail(400, "malformed request method");
    return false;
  }
  if (target.empty() || target.size() > kMaxTargetBytes) {
    fail(target.empty() ? 400 : 414, target.empty() ? "empty request target" : "request target too long");
    return false;
  }
  for (char c : target) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u == 0x7f) {
      fail(400, "invalid character in the request target");
      return false;
    }
  }
  if (version == "HTTP/1.1") {
    req_.version_minor = 1;
  } else if (version == "HTTP/1.0") {
    req_.version_minor = 0;
  } else if (version.substr(0, 5) == "HTTP/") {
    fail(505, "HTTP version not supported (HTTP/1.0 and HTTP/1.1 are)");
    return false;
  } else {
    fail(400, "malformed HTTP version");
    return false;
  }
  req_.method = std::string(method);
  req_.target = std::string(target);
  // origin-form "/path?query"; absolute-form "http://host/path?query" (its
  // path is used); "*" only for OPTIONS. Anything else is not a target.
  std::string_view origin = target;
  if (origin.substr(0, 7) == "http://" || origin.substr(0, 8) == "https://") {
    const size_t slash = origin.find('/', origin.find("//") + 2);
    origin = slash == std::string_view::npos ? std::string_view("/") : origin.substr(slash);
  }
  if (origin == "*" && method == "OPTIONS") {
    req_.path = "*";
    return true;
  }
  if (origin.front() != '/') {
    fail(400, "the request target must be an absolute path (origin-form)");
    return false;
  }
  const size_t q = origin.find('?');
  req_.path = std::string(origin.substr(0, q));
  req_.query = q == std::string_view::npos ? "" : std::string(origin.substr(q + 1));
  return true;
}

bool RequestParser::parse_header_line(std::string_view line) {
  if (line.front() == ' ' || line.front() == '\t') {
    fail(400, "obsolete line folding in the header section");
    return false;
  }
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos || !is_token(line.substr(0, colon))) {
    fail(400, "malformed header field");
    return false;
  }
  const std::string_view value = trim(line.substr(colon + 1));
  for (char c : value) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\t') || u == 0x7f) {
      fail(400, "invalid character in a header value");
      return false;
    }
  }
  if (req_.headers.size() >= limits_.max_headers) {
    fail(431, "too many header fields");
    return false;
  }
  req_.headers.push_back({to_lower(line.substr(0, colon)), std::string(value)});
  return true;
}

bool RequestParser::parse_head(std::string_view head) {
  bool first = true;
  while (!head.empty()) {
    const size_t nl = head.find('\n');
    std::string_view line = head.substr(0, nl);
    head.remove_prefix(nl == std::string_view::npos ? head.size() : nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find('\r') != std::string_view::npos || line.find('\0') != std::string_view::npos) {
      fail(400, "stray CR or NUL in the request head");
      return false;
    }
    if (first) {
      if (!parse_request_line(line)) return false;
      first = false;
      continue;
    }
    if (line.empty()) break;  // the blank line ending the head
    if (!parse_header_line(line)) return false;
  }
  return finish_head();
}

bool RequestParser::finish_head() {
  bool has_length = false, has_te = false;
  uint64_t length = 0;
  std::vector<std::string_view> codings;
  bool close = req_.version_minor == 0, keep_alive_token = false;
  for (const Header& h : req_.headers) {
    if (h.name == "content-length") {
      uint64_t v = 0;
      if (!parse_content_length(h.value, &v)) {
        fail(400, "invalid or conflicting Content-Length");
        return false;
      }
      if (has_length && v != length) {
        fail(400, "conflicting Content-Length headers");
        return false;
      }
      has_length = true;
      length = v;
    } else if (h.name == "transfer-encoding") {
      has_te = true;
      for (std::string_view c : split_list(h.value)) codings.push_back(c);
    } else if (h.name == "connection") {
      for (std::string_view t : split_list(h.value)) {
        if (equals_ci(t, "close")) close = true;
        if (equals_ci(t, "keep-alive")) keep_alive_token = true;
      }
    } else if (h.name == "expect") {
      if (!equals_ci(trim(h.value), "100-continue")) {
        fail(417, "unsupported expectation (only 100-continue is)");
        return false;
      }
      req_.expect_continue = true;
    }
  }
  if (req_.version_minor == 0 && keep_alive_token) close = false;
  for (const Header& h : req_.headers)
    if (h.name == "connection")
      for (std::string_view t : split_list(h.value))
        if (equals_ci(t, "close")) close = true;
  req_.keep_alive = !close;
  if (has_te) {
    if (has_length) {
      fail(400, "both Content-Length and Transfer-Encoding are present");
      return false;
    }
    if (codings.empty() || !equals_ci(codings.back(), "chunked")) {
      fail(400, "the final transfer coding must be chunked");
      return false;
    }
    if (codings.size() != 1) {
      fail(501, "unsupported transfer coding (only chunked is)");
      return false;
    }
    req_.chunked = true;
    phase_ = Phase::kChunkSize;
    head_.clear();
    return true;
  }
  if (length > limits_.max_body_bytes) {
    fail(413, "the request body is too large (limit " + std::to_string(limits_.max_body_bytes) + " bytes)");
    return false;
  }
  if (length == 0) {
    req_.expect_continue = false;
    phase_ = Phase::kDone;
    return true;
  }
  req_.body.reserve(static_cast<size_t>(length));
  remaining_ = length;
  phase_ = Phase::kBody;
  return true;
}

RequestParser::State RequestParser::feed(std::string_view data, size_t* consumed) {
  size_t pos = 0;
  *consumed = 0;
  while (true) {
    switch (phase_) {
      case Phase::kDone: *consumed = pos; return State::kDone;
      case Phase::kError: *consumed = pos; return State::kError;
      case Phase::kHead: {
        // Empty lines before the request line are ignored (RFC 9112 2.2).
        if (head_.empty())
          while (pos < data.size() && (data[pos] == '\r' || data[pos] == '\n')) ++pos;
        if (pos == data.size()) {
          *consumed = pos;
          return State::kNeedMore;
        }
        started_ = true;
        const size_t before = head_.size();
        const size_t room = limits_.max_head_bytes + 4 - std::min(limits_.max_head_bytes + 4, before);
        head_.append(data.substr(pos, std::min(room, data.size() - pos)));
        size_t end = 0;
        for (size_t i = head_scan_; i < head_.size() && end == 0; ++i) {
          if (head_[i] != '\n') continue;
          if (i + 1 < head_.size() && head_[i + 1] == '\n') end = i + 2;
          if (i + 2 < head_.size() && head_[i + 1] == '\r' && head_[i + 2] == '\n') end = i + 3;
        }
        if (end == 0) {
          if (head_.size() > limits_.max_head_bytes) return *consumed = pos, fail(431, "the request head is too large");
          head_scan_ = head_.size() >= 2 ? head_.size() - 2 : 0;
          *consumed = data.size();
          return State::kNeedMore;
        }
        if (end > limits_.max_head_bytes) return *consumed = pos, fail(431, "the request head is too large");
        pos += end - before;
        head_.resize(end);
        if (!parse_head(head_)) {
          *consumed = pos;
          return State::kError;
        }
        break;
      }
      case Phase::kBody: {
        const size_t take = static_cast<size_t>(std::min<uint64_t>(remaining_, data.size() - pos));
        req_.body.append(data.substr(pos, take));
        pos += take;
        remaining_ -= take;
        if (remaining_ == 0) {
          phase_ = Phase::kDone;
          break;
        }
        *consumed = pos;
        return State::kNeedMore;
      }
      case Phase::kChunkSize:
      case Phase::kTrailers: {
        // One line at a time: a chunk-size line, or a trailer field.
        const size_t nl = data.find('\n', pos);
        const size_t take = (nl == std::string_view::npos ? data.size() : nl + 1) - pos;
        const size_t limit = phase_ == Phase::kChunkSize ? kMaxChunkLineBytes : limits_.max_head_bytes;
        if (head_.size() + take > limit || trailer_bytes_ + take > limits_.max_head_bytes) {
          *consumed = pos;
          return phase_ == Phase::kChunkSize ? fail(400, "malformed chunk size line")
                                             : fail(431, "the trailer section is too large");
        }
        head_.append(data.substr(pos, take));
        pos += take;
        if (nl == std::string_view::npos) {
          *consumed = pos;
          return State::kNeedMore;
        }
        std::string_view line(head_);
        line.remove_suffix(1);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (phase_ == Phase::kTrailers) {
          trailer_bytes_ += head_.size();
          head_.clear();
          if (line.empty()) phase_ = Phase::kDone;
          break;
        }
        uint64_t size = 0;
        size_t digits = 0;
        while (digits < line.size() && hex_value(line[digits]) >= 0) {
          if (size >> 56) return *consumed = pos, fail(413, "the request body is too large");
          size = size * 16 + static_cast<uint64_t>(hex_value(line[digits]));
          ++digits;
        }
        const std::string_view rest = trim(line.substr(digits));
        if (digits == 0 || (!rest.empty() && rest.front() != ';'))
          return *consumed = pos, fail(400, "malformed chunk size");
        head_.clear();
        if (size == 0) {
          phase_ = Phase::kTrailers;
          break;
        }
        if (size > limits_.max_body_bytes - std::min(limits_.max_body_bytes, req_.body.size()))
          return *consumed = pos, fail(413, "the request body is too large (limit " +
                                                std::to_string(limits_.max_body_bytes) + " bytes)");
        remaining_ = size;
        phase_ = Phase::kChunkData;
        break;
      }
      case Phase::kChunkData: {
        const size_t take = static_cast<size_t>(std::min<uint64_t>(remaining_, data.size() - pos));
        req_.body.append(data.substr(pos, take));
        pos += take;
        remaining_ -= take;
        if (remaining_ > 0) {
          *consumed = pos;
          return State::kNeedMore;
        }
        phase_ = Phase::kChunkDataEnd;
        break;
      }
      case Phase::kChunkDataEnd: {
        // CRLF (or a bare LF) after the chunk data.
        while (pos < data.size() && head_ != "\n" && head_ != "\r\n") {
          head_.push_back(data[pos++]);
          if (head_ != "\r" && head_ != "\n" && head_ != "\r\n")
            return *consumed = pos, fail(400, "chunk data not followed by CRLF");
        }
        if (head_ == "\n" || head_ == "\r\n") {
          head_.clear();
          phase_ = Phase::kChunkSize;
          break;
        }
        *consumed = pos;
        return State::kNeedMore;
      }
    }
  }
}

}  // namespace pagoda::http
