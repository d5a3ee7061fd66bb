#include "http/request_parser.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace pagoda::http {
namespace {

struct Parsed {
  RequestParser::State state;
  Request req;
  size_t consumed = 0;
  int status = 0;
};

// Feeds `data` in pieces of the given sizes (the rest in one piece).
Parsed feed_in_pieces(const std::string& data, const std::vector<size_t>& pieces, ParseLimits limits = {}) {
  RequestParser p(limits);
  std::string buf;
  size_t sent = 0, used_total = 0;
  size_t k = 0;
  while (true) {
    const size_t n = k < pieces.size() ? pieces[k++] : data.size() - sent;
    buf.append(data, sent, std::min(n, data.size() - sent));
    sent += std::min(n, data.size() - sent);
    size_t used = 0;
    const auto st = p.feed(buf, &used);
    buf.erase(0, used);
    used_total += used;
    if (st != RequestParser::State::kNeedMore || sent == data.size()) {
      Parsed out{st, st == RequestParser::State::kDone ? p.take_request() : Request{}, used_total, p.error_status()};
      return out;
    }
  }
}

Parsed parse(const std::string& data, ParseLimits limits = {}) { return feed_in_pieces(data, {}, limits); }

TEST(RequestParser, SimpleGetAndPost) {
  auto g = parse("GET /health?x=1 HTTP/1.1\r\nHost: a\r\nX-Thing:  v  \r\n\r\n");
  ASSERT_EQ(g.state, RequestParser::State::kDone);
  EXPECT_EQ(g.req.method, "GET");
  EXPECT_EQ(g.req.path, "/health");
  EXPECT_EQ(g.req.query, "x=1");
  ASSERT_NE(g.req.header("x-thing"), nullptr);
  EXPECT_EQ(*g.req.header("x-thing"), "v");
  EXPECT_TRUE(g.req.keep_alive);
  auto p = parse("POST /v1/completions HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello");
  ASSERT_EQ(p.state, RequestParser::State::kDone);
  EXPECT_EQ(p.req.body, "hello");
}

TEST(RequestParser, EverySplitGivesTheSameRequest) {
  const std::string req =
      "POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
      "3;ext=1\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\nTrailer: t\r\n\r\n";
  for (size_t step = 1; step <= req.size(); ++step) {
    std::vector<size_t> pieces(req.size() / step + 1, step);
    auto r = feed_in_pieces(req, pieces);
    ASSERT_EQ(r.state, RequestParser::State::kDone) << "step " << step;
    EXPECT_EQ(r.req.body, "abc0123456789abcdef") << "step " << step;
    EXPECT_EQ(r.consumed, req.size());
  }
  std::mt19937 rng(7);
  for (int t = 0; t < 200; ++t) {
    std::vector<size_t> pieces;
    for (int i = 0; i < 40; ++i) pieces.push_back(std::uniform_int_distribution<size_t>(0, 9)(rng));
    auto r = feed_in_pieces(req, pieces);
    ASSERT_EQ(r.state, RequestParser::State::kDone);
    EXPECT_EQ(r.req.body, "abc0123456789abcdef");
  }
}

TEST(RequestParser, PipelinedRequestsAreConsumedOneAtATime) {
  const std::string one = "GET /a HTTP/1.1\r\n\r\n";
  const std::string two = "POST /b HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi";
  const std::string three = "GET /c HTTP/1.1\r\nConnection: close\r\n\r\n";
  std::string all = one + two + three;
  RequestParser p;
  std::vector<std::string> paths;
  while (!all.empty()) {
    size_t used = 0;
    ASSERT_EQ(p.feed(all, &used), RequestParser::State::kDone);
    all.erase(0, used);
    Request r = p.take_request();
    paths.push_back(r.path + ":" + r.body + ":" + (r.keep_alive ? "ka" : "close"));
    p.reset();
  }
  EXPECT_EQ(paths, (std::vector<std::string>{"/a::ka", "/b:hi:ka", "/c::close"}));
}

TEST(RequestParser, FramingAttacksAreRefused) {
  struct Case {
    std::string data;
    int status;
  };
  const std::vector<Case> cases = {
      {"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\nabcde", 400},
      {"POST / HTTP/1.1\r\nContent-Length: 5, 7\r\n\r\nabcde", 400},
      {"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nContent-Length: 0x10\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 400},
      {"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501},
      {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400},
      {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcXY", 400},
      {"GET / HTTP/1.1\r\nX: a\r\n folded\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nBad Name: a\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nX: a\rb\r\n\r\n", 400},
      {"GET / HTTP/2.0\r\n\r\n", 505},
      {"GET /  HTTP/1.1\r\n\r\n", 400},
      {"GET ?x HTTP/1.1\r\n\r\n", 400},
      {"GET health HTTP/1.1\r\n\r\n", 400},
      {"GET * HTTP/1.1\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nExpect: magic\r\n\r\n", 417},
      {"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n", 400},
  };
  for (const Case& c : cases) {
    auto r = parse(c.data);
    EXPECT_EQ(r.state, RequestParser::State::kError) << c.data;
    EXPECT_EQ(r.status, c.status) << c.data;
  }
  // Identical repeated lengths are one length (RFC 9112 6.3).
  auto same = parse("POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok");
  ASSERT_EQ(same.state, RequestParser::State::kDone);
  EXPECT_EQ(same.req.body, "ok");
}

TEST(RequestParser, LimitsHoldWhileReading) {
  ParseLimits lim;
  lim.max_body_bytes = 100;
  lim.max_head_bytes = 256;
  lim.max_headers = 4;
  // Content-Length over the limit: refused on the head, before any body.
  auto big = parse("POST / HTTP/1.1\r\nContent-Length: 101\r\n\r\n", lim);
  EXPECT_EQ(big.status, 413);
  // Chunked: refused as soon as the declared chunks pass the limit, with the
  // rest of the body never fed.
  RequestParser p(lim);
  std::string head = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
  size_t used = 0;
  ASSERT_EQ(p.feed(head, &used), RequestParser::State::kNeedMore);
  std::string chunk = "40\r\n" + std::string(64, 'a') + "\r\n";
  ASSERT_EQ(p.feed(chunk, &used), RequestParser::State::kNeedMore);
  EXPECT_EQ(p.feed("40\r\n", &used), RequestParser::State::kError);
  EXPECT_EQ(p.error_status(), 413);
  // Heads: too long, too many fields; a head without an end never grows past the limit.
  EXPECT_EQ(parse("GET / HTTP/1.1\r\nX: " + std::string(300, 'a') + "\r\n\r\n", lim).status, 431);
  EXPECT_EQ(parse("GET / HTTP/1.1\r\nA: 1\r\nB: 1\r\nC: 1\r\nD: 1\r\nE: 1\r\n\r\n", lim).status, 431);
  RequestParser endless(lim);
  EXPECT_EQ(endless.feed("GET / HTTP/1.1\r\nX: " + std::string(1000, 'a'), &used), RequestParser::State::kError);
  EXPECT_EQ(endless.error_status(), 431);
  // A huge hex chunk size is refused, not overflowed.
  EXPECT_EQ(parse("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n", lim).status, 413);
}

TEST(RequestParser, ConnectionSemantics) {
  EXPECT_FALSE(parse("GET / HTTP/1.0\r\n\r\n").req.keep_alive);
  EXPECT_TRUE(parse("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").req.keep_alive);
  EXPECT_FALSE(parse("GET / HTTP/1.1\r\nConnection: Close\r\n\r\n").req.keep_alive);
  EXPECT_TRUE(parse("POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nx").req.expect_continue);
  // Absolute-form targets use their path.
  auto abs = parse("GET http://example.com:8080/v1/models?a=b HTTP/1.1\r\n\r\n");
  ASSERT_EQ(abs.state, RequestParser::State::kDone);
  EXPECT_EQ(abs.req.path, "/v1/models");
  EXPECT_EQ(abs.req.query, "a=b");
  EXPECT_EQ(parse("OPTIONS * HTTP/1.1\r\n\r\n").req.path, "*");
  // Bare LF line ends and leading empty lines are tolerated.
  auto lf = parse("\r\n\nGET /lf HTTP/1.1\nHost: a\n\n");
  ASSERT_EQ(lf.state, RequestParser::State::kDone);
  EXPECT_EQ(lf.req.path, "/lf");
}

TEST(RequestParser, RandomBytesNeverCrash) {
  std::mt19937 rng(11);
  const std::string alphabet = "GETPOST /HTP1.0\r\n:;,-0123456789abcdefchunkedContent-LengthTransfer-Encoding ";
  ParseLimits lim;
  lim.max_body_bytes = 1000;
  lim.max_head_bytes = 2000;
  for (int t = 0; t < 2000; ++t) {
    std::string s;
    const int n = std::uniform_int_distribution<int>(0, 300)(rng);
    for (int i = 0; i < n; ++i)
      s.push_back(rng() % 4 == 0 ? static_cast<char>(rng()) : alphabet[rng() % alphabet.size()]);
    if (t % 3 == 0) s = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + s;
    RequestParser p(lim);
    size_t used = 0;
    const auto st = p.feed(s, &used);
    EXPECT_LE(used, s.size());
    if (st == RequestParser::State::kError) {
      EXPECT_GE(p.error_status(), 400);
    }
    if (st == RequestParser::State::kDone) {
      EXPECT_LE(p.request().body.size(), lim.max_body_bytes);
    }
  }
}

}  // namespace
}  // namespace pagoda::http
