// Incremental HTTP/1.1 request parser (RFC 9112) for the server's event loop:
// bytes go in as they arrive, a complete request (head and body, any transfer
// encoding) comes out. Limits are enforced while reading, so an oversized
// head or body is refused before it is buffered. What it rejects: malformed
// request lines and header fields, obsolete line folding, conflicting
// Content-Length values, Content-Length together with Transfer-Encoding, and
// transfer codings other than chunked.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pagoda::http {

struct Header {
  std::string name;  // lower case
  std::string value;
};

struct Request {
  std::string method;  // as sent (methods are case-sensitive)
  std::string target;  // request-target as sent
  std::string path;    // target before '?'
  std::string query;   // after '?', "" when none
  int version_minor = 1;
  std::vector<Header> headers;
  std::string body;  // de-chunked
  bool keep_alive = true;
  bool expect_continue = false;
  bool chunked = false;

  // The first value of a header (name in lower case); nullptr when absent.
  const std::string* header(std::string_view lower_name) const;
};

struct ParseLimits {
  size_t max_head_bytes = 64 << 10;  // request line + header fields (431 beyond)
  size_t max_headers = 128;          // header fields (431 beyond)
  size_t max_body_bytes = 8 << 20;   // de-chunked body (413 beyond)
};

class RequestParser {
 public:
  enum class State { kNeedMore, kDone, kError };

  explicit RequestParser(ParseLimits limits = {}) : limits_(limits) {}

  // Consumes from `data` (bytes not consumed by earlier calls) and sets
  // *consumed to how many were used. kDone: request() is complete and any
  // bytes after *consumed belong to the next request (pipelining). kError:
  // error_status()/error_message() say why; the connection must be closed.
  State feed(std::string_view data, size_t* consumed);

  // True once the head is parsed (Expect: 100-continue may be answered).
  bool head_done() const { return phase_ > Phase::kHead; }
  // True when some bytes of a request have arrived.
  bool started() const { return started_; }
  const Request& request() const { return req_; }
  Request take_request() { return std::move(req_); }
  int error_status() const { return error_status_; }
  const std::string& error_message() const { return error_message_; }

  // Back to the start, for the next request on the connection.
  void reset();

 private:
  enum class Phase { kHead, kBody, kChunkSize, kChunkData, kChunkDataEnd, kTrailers, kDone, kError };

  State fail(int status, std::string message);
  bool parse_head(std::string_view head);
  bool parse_request_line(std::string_view line);
  bool parse_header_line(std::string_view line);
  bool finish_head();

  ParseLimits limits_;
  Phase phase_ = Phase::kHead;
  bool started_ = false;
  Request req_;
  std::string head_;          // head bytes so far (kHead) or the current line (chunk size, trailers)
  size_t head_scan_ = 0;      // where the search for the end of the head resumes
  uint64_t remaining_ = 0;    // body or chunk bytes still to read
  size_t trailer_bytes_ = 0;  // trailer section size so far
  int error_status_ = 0;
  std::string error_message_;
};

// "Content-Length" values: a decimal number, or a list of identical ones
// ("5, 5"). False when malformed or the values differ.
bool parse_content_length(std::string_view value, uint64_t* out);

}  // namespace pagoda::http
