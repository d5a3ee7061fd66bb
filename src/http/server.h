// A small HTTP/1.1 server built for hostile networks: one event-loop thread
// (epoll) owns every connection while its request arrives, so slow or idle
// clients cost a file descriptor and a buffer, never a worker thread; a
// complete request goes to a worker pool (or runs on the loop when the
// caller marks it quick, e.g. /health), and the connection comes back to the
// loop for its next request. Enforced here:
// - a deadline for each whole request head + body (not per byte), an idle
//   deadline between keep-alive requests, a write deadline for replies;
// - caps on open connections in total and per client address;
// - body and head limits while reading, for every transfer encoding;
// - pipelined requests answered in order; TCP_NODELAY; one write per reply;
// - stop(): no new connections, idle ones closed now, running handlers get
//   a grace period, after which their sockets are shut down (their writes
//   fail and client_gone() turns true, so they end promptly).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "http/request_parser.h"

namespace pagoda::http {

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<Header> headers;  // extra header fields
  std::string body;
};

const char* reason_phrase(int status);

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port
  int num_threads = 64;
  ParseLimits limits;
  int request_timeout_ms = 30000;  // whole head + body, from its first byte
  int idle_timeout_ms = 30000;     // keep-alive connection with no request
  int write_timeout_ms = 30000;    // a reply the client does not read
  int max_connections = 4096;
  int max_connections_per_client = 512;  // per remote address
  int shutdown_grace_ms = 10000;
};

struct Connection;
class ServerCore;

// The reply channel of one request: a whole response, or a stream (chunked
// transfer encoding). Writes return false once the client is gone.
class Responder {
 public:
  bool send(const Response& r);
  bool begin_stream(int status, std::string_view content_type, const std::vector<Header>& headers = {});
  bool write(std::string_view data);
  bool end_stream();
  // The client closed its side, the connection broke, or the server is
  // forcing shutdown. Cheap (one poll); call it while waiting.
  bool client_gone();
  bool responded() const { return responded_; }
  int status() const { return status_; }

 private:
  friend class ServerCore;
  Responder(ServerCore* core, Connection* conn, bool direct, bool head_only, bool keep_alive, int version_minor)
      : core_(core),
        conn_(conn),
        direct_(direct),
        head_only_(head_only),
        keep_alive_(keep_alive),
        version_minor_(version_minor) {}
  bool emit(std::string data);

  ServerCore* core_;
  Connection* conn_;
  bool direct_;  // worker: write to the socket; loop: into the connection's buffer
  bool head_only_;
  bool keep_alive_;
  int version_minor_;
  bool responded_ = false;
  bool streaming_ = false;
  bool chunked_ = false;
  bool ended_ = false;
  int status_ = 0;
};

using Handler = std::function<void(const Request&, Responder&)>;
// True: run the handler on the event loop (it must be fast and never block).
using QuickPredicate = std::function<bool(const Request&)>;
// The body of an error the HTTP layer itself answers (400, 408, 413, 429, 431, 503...).
using ErrorPage = std::function<Response(int status, const std::string& message)>;

struct ServerStats {
  int64_t open_connections = 0;
  int64_t refused_connections = 0;  // over a connection cap
  int64_t timed_out_requests = 0;   // request deadline passed
};

class HttpServer {
 public:
  HttpServer(ServerOptions options, Handler handler, QuickPredicate quick, ErrorPage error_page);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and listens; returns the port (the chosen one for port 0).
  Result<int> bind();
  // Serves until stop() (from any thread); false if the loop failed.
  bool run();
  void stop();
  ServerStats stats() const;

 private:
  std::unique_ptr<ServerCore> core_;
};

}  // namespace pagoda::http
