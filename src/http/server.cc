#include "http/server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <malloc.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>

namespace pagoda::http {

using Clock = std::chrono::steady_clock;

constexpr size_t kLargeBody = 1 << 20;

const char* reason_phrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 417: return "Expectation Failed";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return status < 300 ? "OK" : status < 500 ? "Client Error" : "Server Error";
  }
}

struct Connection {
  int fd = -1;
  uint32_t gen = 0;  // tells a reused descriptor's events from stale ones
  std::string addr;
  std::string in;  // received bytes; [in_off, end) not yet parsed
  size_t in_off = 0;
  RequestParser parser;
  std::string out;  // reply bytes the loop still has to send
  size_t out_off = 0;
  enum class State { kReading, kWriting, kBusy, kLingering } state = State::kReading;
  bool close_after_write = false;
  bool linger = false;           // after the reply, drain what the client still sends, then close
  size_t linger_budget = 0;      // bytes still to drain
  bool request_started = false;  // deadline is the request's, not the idle one
  bool sent_continue = false;
  bool peer_eof = false;
  std::atomic<bool> broken{false};  // a write failed: close after the handler
  Clock::time_point deadline;
  size_t body_bytes = 0;  // of the request being handled
};

class ServerCore {
 public:
  ServerCore(ServerOptions o, Handler h, QuickPredicate q, ErrorPage e)
      : opt_(std::move(o)), handler_(std::move(h)), quick_(std::move(q)), error_page_(std::move(e)) {}
  ~ServerCore() {
    for (auto& [fd, c] : conns_) ::close(fd);
    if (listen_fd_ >= 0) ::close(listen_fd_);
    if (epoll_fd_ >= 0) ::close(epoll_fd_);
    if (wake_fd_ >= 0) ::close(wake_fd_);
  }

  Result<int> bind();
  bool run();
  void stop() {
    stopping_ = true;
    wake();
  }
  ServerStats stats() const {
    ServerStats s;
    s.open_connections = open_.load();
    s.refused_connections = refused_.load();
    s.timed_out_requests = timed_out_.load();
    return s;
  }

  // Used by Responder on worker threads.
  bool write_direct(Connection* c, std::string_view data);
  bool client_gone(Connection* c);
  bool stopping() const { return stopping_; }

 private:
  struct Job {
    Connection* conn;
    Request req;
  };

  void wake() {
    const uint64_t one = 1;
    if (wake_fd_ >= 0) [[maybe_unused]]
      auto n = ::write(wake_fd_, &one, sizeof(one));
  }
  void accept_all();
  void refuse(int fd, int status, const std::string& message);
  void on_readable(Connection* c);
  enum class Flush { kDone, kPending, kClosed };
  void process_input(Connection* c);
  Flush dispatch(Connection* c, Request req);
  void queue_reply(Connection* c, const Response& r, bool close);
  Flush flush(Connection* c);
  void resume(Connection* c);
  void drain(Connection* c);
  void close_conn(Connection* c);
  void take_returned();
  void check_deadlines(Clock::time_point now);
  void worker_loop();
  void epoll_set(Connection* c, uint32_t events, int op);

  ServerOptions opt_;
  Handler handler_;
  QuickPredicate quick_;
  ErrorPage error_page_;
  int listen_fd_ = -1, epoll_fd_ = -1, wake_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> force_{false};  // grace period over: handlers' sockets are shut down
  std::atomic<int64_t> open_{0}, refused_{0}, timed_out_{0};

  // Loop-owned.
  std::unordered_map<int, std::unique_ptr<Connection>> conns_;
  std::unordered_map<std::string, int> per_addr_;
  int busy_ = 0;
  uint32_t next_gen_ = 0;
  bool accept_paused_ = false;
  Clock::time_point accept_paused_until_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;               // to the workers
  std::vector<Connection*> returned_;  // back from the workers
  bool workers_exit_ = false;
};

bool Responder::emit(std::string data) {
  if (direct_) return core_->write_direct(conn_, data);
  conn_->out += data;
  return true;
}

bool Responder::send(const Response& r) {
  if (responded_) return false;
  responded_ = true;
  status_ = r.status;
  std::string head = "HTTP/1.1 " + std::to_string(r.status) + " " + reason_phrase(r.status) + "\r\n";
  if (!r.content_type.empty()) head += "Content-Type: " + r.content_type + "\r\n";
  for (const Header& h : r.headers) head += h.name + ": " + h.value + "\r\n";
  head += "Content-Length: " + std::to_string(r.body.size()) + "\r\n";
  if (!keep_alive_) head += "Connection: close\r\n";
  if (keep_alive_ && version_minor_ == 0) head += "Connection: keep-alive\r\n";
  head += "\r\n";
  if (!head_only_) head += r.body;  // one write: head and body together
  return emit(std::move(head));
}

bool Responder::begin_stream(int status, std::string_view content_type, const std::vector<Header>& headers) {
  if (responded_) return false;
  responded_ = true;
  streaming_ = true;
  status_ = status;
  chunked_ = version_minor_ == 1;  // HTTP/1.0: the body ends when the connection closes
  if (!chunked_) keep_alive_ = false;
  std::string head = "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) + "\r\n";
  head += "Content-Type: " + std::string(content_type) + "\r\n";
  for (const Header& h : headers) head += h.name + ": " + h.value + "\r\n";
  if (chunked_) head += "Transfer-Encoding: chunked\r\n";
  if (!keep_alive_) head += "Connection: close\r\n";
  head += "\r\n";
  if (head_only_) ended_ = true;
  return emit(std::move(head));
}

bool Responder::write(std::string_view data) {
  if (!streaming_ || ended_) return false;
  if (data.empty()) return !client_gone();
  if (!chunked_) return emit(std::string(data));
  char size[24];
  std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
  std::string chunk = size;
  chunk.append(data);
  chunk += "\r\n";
  return emit(std::move(chunk));
}

bool Responder::end_stream() {
  if (!streaming_ || ended_) return false;
  ended_ = true;
  return !chunked_ || emit("0\r\n\r\n");
}

bool Responder::client_gone() { return !direct_ ? false : core_->client_gone(conn_); }

// ---------------------------------------------------------------------------

namespace {

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL, 0) | O_NONBLOCK); }

std::string peer_address(const sockaddr_storage& a) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (a.ss_family == AF_INET)
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&a)->sin_addr, buf, sizeof(buf));
  else if (a.ss_family == AF_INET6)
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&a)->sin6_addr, buf, sizeof(buf));
  return buf;
}

int ms_until(Clock::time_point t, Clock::time_point now) {
  if (t <= now) return 0;
  return static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(t - now).count()) + 1;
}

// Many idle connections need many descriptors: raise the soft limit.
// Returns the soft limit after raising it.
int64_t raise_fd_limit() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0) return 1024;
  if (r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &r);
    ::getrlimit(RLIMIT_NOFILE, &r);
  }
  return r.rlim_cur == RLIM_INFINITY ? (int64_t{1} << 30) : static_cast<int64_t>(r.rlim_cur);
}

}  // namespace

Result<int> ServerCore::bind() {
  // Keep descriptors for the model, logs and the listener itself.
  const int64_t fds = raise_fd_limit();
  const int64_t cap = std::max<int64_t>(16, std::min<int64_t>(opt_.max_connections, fds - 64));
  if (cap < opt_.max_connections) {
    // Fewer descriptors than asked for: one address may still take at most half.
    opt_.max_connections = static_cast<int>(cap);
    opt_.max_connections_per_client = std::min(opt_.max_connections_per_client, std::max(1, opt_.max_connections / 2));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(opt_.port);
  const char* host = opt_.host.empty() ? nullptr : opt_.host.c_str();
  if (int rc = ::getaddrinfo(host, port.c_str(), &hints, &res); rc != 0)
    return Status(StatusCode::kUnavailable, "cannot resolve " + opt_.host + ": " + ::gai_strerror(rc));
  std::string why = "no address";
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    const int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0) {
      listen_fd_ = fd;
      break;
    }
    why = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(res);
  if (listen_fd_ < 0)
    return Status(StatusCode::kUnavailable, "cannot bind to " + opt_.host + ":" + port + " (" + why + ")");
  set_nonblocking(listen_fd_);
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
  const int bound = a.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&a)->sin6_port)
                                            : ntohs(reinterpret_cast<sockaddr_in*>(&a)->sin_port);
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || wake_fd_ < 0) return Status(StatusCode::kUnavailable, "cannot create the event loop");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = listen_fd_;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  ev.data.fd = wake_fd_;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  return bound;
}

void ServerCore::epoll_set(Connection* c, uint32_t events, int op) {
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = (static_cast<uint64_t>(c->gen) << 32) | static_cast<uint32_t>(c->fd);
  ::epoll_ctl(epoll_fd_, op, c->fd, &ev);
}

void ServerCore::refuse(int fd, int status, const std::string& message) {
  // Best effort: one non-blocking write, then close.
  Response r = error_page_(status, message);
  std::string s = "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) +
                  "\r\nContent-Type: " + r.content_type + "\r\nContent-Length: " + std::to_string(r.body.size()) +
                  "\r\nConnection: close\r\n\r\n" + r.body;
  [[maybe_unused]] auto n = ::send(fd, s.data(), s.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  ::close(fd);
}

void ServerCore::accept_all() {
  while (true) {
    sockaddr_storage a{};
    socklen_t len = sizeof(a);
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of descriptors: stop watching the listener for a moment
        // (level-triggered, it would wake the loop in a busy spin).
        ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
        accept_paused_until_ = Clock::now() + std::chrono::milliseconds(100);
        accept_paused_ = true;
      }
      return;
    }
    std::string addr = peer_address(a);
    if (static_cast<int>(conns_.size()) >= opt_.max_connections) {
      ++refused_;
      refuse(fd, 503, "too many open connections");
      continue;
    }
    int& from_addr = per_addr_[addr];
    if (from_addr >= opt_.max_connections_per_client) {
      ++refused_;
      refuse(fd, 429, "too many open connections from this address");
      continue;
    }
    ++from_addr;
    const int yes = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
    auto c = std::make_unique<Connection>();
    c->fd = fd;
    c->gen = ++next_gen_;
    if (c->gen == 0) c->gen = ++next_gen_;
    c->addr = std::move(addr);
    c->parser = RequestParser(opt_.limits);
    c->deadline = Clock::now() + std::chrono::milliseconds(opt_.request_timeout_ms);
    Connection* raw = c.get();
    conns_[fd] = std::move(c);
    ++open_;
    epoll_set(raw, EPOLLIN | EPOLLRDHUP, EPOLL_CTL_ADD);
  }
}

void ServerCore::close_conn(Connection* c) {
  const int fd = c->fd;
  auto it = per_addr_.find(c->addr);
  if (it != per_addr_.end() && --it->second <= 0) per_addr_.erase(it);
  if (c->state != Connection::State::kBusy) ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  ::close(fd);
  conns_.erase(fd);
  --open_;
}

void ServerCore::on_readable(Connection* c) {
  char buf[64 << 10];
  size_t got = 0;
  while (got < (1u << 20)) {  // at most 1 MiB per wake-up, so one client cannot hog the loop
    const ssize_t n = ::recv(c->fd, buf, sizeof(buf), 0);
    if (n > 0) {
      c->in.append(buf, static_cast<size_t>(n));
      got += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) c->peer_eof = true;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return close_conn(c);
    break;
  }
  resume(c);
}

void ServerCore::drain(Connection* c) {
  char buf[64 << 10];
  while (true) {
    const ssize_t n = ::recv(c->fd, buf, sizeof(buf), 0);
    if (n > 0 && static_cast<size_t>(n) < c->linger_budget) {
      c->linger_budget -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    return close_conn(c);  // EOF, error, or drained enough
  }
}

void ServerCore::process_input(Connection* c) {
  const int fd = c->fd;
  while (c->state == Connection::State::kReading) {
    size_t used = 0;
    const auto st = c->parser.feed(std::string_view(c->in).substr(c->in_off), &used);
    c->in_off += used;
    if (c->in_off == c->in.size()) {
      c->in.clear();
      c->in_off = 0;
    } else if (c->in_off > (64u << 10) && c->in_off > c->in.size() / 2) {
      c->in.erase(0, c->in_off);
      c->in_off = 0;
    }
    if (st == RequestParser::State::kNeedMore) {
      if (c->parser.started() && !c->request_started) {
        c->request_started = true;
        c->deadline = Clock::now() + std::chrono::milliseconds(opt_.request_timeout_ms);
      }
      if (c->parser.head_done() && c->parser.request().expect_continue && !c->sent_continue) {
        c->sent_continue = true;
        static constexpr std::string_view k100 = "HTTP/1.1 100 Continue\r\n\r\n";
        [[maybe_unused]] auto n = ::send(fd, k100.data(), k100.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      }
      return;
    }
    if (st == RequestParser::State::kError) {
      c->linger = true;
      queue_reply(c, error_page_(c->parser.error_status(), c->parser.error_message()), true);
      return;
    }
    Request req = c->parser.take_request();
    c->parser.reset();
    c->request_started = false;
    c->sent_continue = false;
    if (stopping_) {
      queue_reply(c, error_page_(503, "the server is shutting down"), true);
      return;
    }
    // A quick reply sent whole leaves the connection reading: go on with
    // the next pipelined request in this loop (not by recursion).
    if (dispatch(c, std::move(req)) != Flush::kDone) return;
  }
}

ServerCore::Flush ServerCore::dispatch(Connection* c, Request req) {
  const bool head_only = req.method == "HEAD";
  if (quick_ && quick_(req)) {
    Responder r(this, c, false, head_only, req.keep_alive && !c->peer_eof, req.version_minor);
    handler_(req, r);
    if (!r.responded()) r.send(error_page_(500, "the handler sent no reply"));
    c->close_after_write = !r.keep_alive_;
    c->state = Connection::State::kWriting;
    c->deadline = Clock::now() + std::chrono::milliseconds(opt_.write_timeout_ms);
    return flush(c);
  }
  c->state = Connection::State::kBusy;
  c->body_bytes = req.body.size();
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c->fd, nullptr);
  ++busy_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back({c, std::move(req)});
  }
  cv_.notify_one();
  return Flush::kPending;
}

void ServerCore::queue_reply(Connection* c, const Response& r, bool close) {
  Responder resp(this, c, false, false, !close, 1);
  resp.send(r);
  c->close_after_write = close;
  c->state = Connection::State::kWriting;
  c->deadline = Clock::now() + std::chrono::milliseconds(opt_.write_timeout_ms);
  flush(c);
}

ServerCore::Flush ServerCore::flush(Connection* c) {
  while (c->out_off < c->out.size()) {
    const ssize_t n = ::send(c->fd, c->out.data() + c->out_off, c->out.size() - c->out_off, MSG_NOSIGNAL);
    if (n > 0) {
      c->out_off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      epoll_set(c, EPOLLOUT | EPOLLRDHUP, EPOLL_CTL_MOD);
      return Flush::kPending;
    }
    close_conn(c);
    return Flush::kClosed;
  }
  c->out.clear();
  c->out_off = 0;
  if (c->linger && !stopping_) {
    // Lingering close: a client still sending the request we refused would
    // get a reset instead of our reply if we closed now. Half-close, drain
    // for a short while (bounded in time and bytes), then close.
    ::shutdown(c->fd, SHUT_WR);
    c->state = Connection::State::kLingering;
    c->linger_budget = 8u << 20;
    c->deadline = Clock::now() + std::chrono::seconds(2);
    epoll_set(c, EPOLLIN | EPOLLRDHUP, EPOLL_CTL_MOD);
    return Flush::kClosed;
  }
  if (c->close_after_write || stopping_) {
    close_conn(c);
    return Flush::kClosed;
  }
  epoll_set(c, EPOLLIN | EPOLLRDHUP, EPOLL_CTL_MOD);
  c->state = Connection::State::kReading;
  c->deadline = Clock::now() + std::chrono::milliseconds(opt_.idle_timeout_ms);
  return Flush::kDone;
}

// Ready for the next request: parse what is already buffered (pipelining);
// a connection whose peer has closed is closed once nothing is left to do.
void ServerCore::resume(Connection* c) {
  const int fd = c->fd;
  process_input(c);
  if (!conns_.count(fd)) return;
  if (c->peer_eof && c->state == Connection::State::kReading) close_conn(c);
}

void ServerCore::take_returned() {
  std::vector<Connection*> back;
  {
    std::lock_guard<std::mutex> lock(mu_);
    back.swap(returned_);
  }
  bool large = false;
  for (Connection* c : back) {
    --busy_;
    if (c->body_bytes >= kLargeBody) {
      large = true;
      if (c->in_off == c->in.size()) {
        std::string().swap(c->in);  // drop the buffer the body was read into
        c->in_off = 0;
      }
    }
    c->state = Connection::State::kReading;  // registered again below, or closed
    if (c->close_after_write || c->broken || stopping_) {
      c->state = Connection::State::kBusy;  // not in epoll
      close_conn(c);
      continue;
    }
    epoll_set(c, EPOLLIN | EPOLLRDHUP, EPOLL_CTL_ADD);
    c->deadline = Clock::now() + std::chrono::milliseconds(opt_.idle_timeout_ms);
    resume(c);
  }
  // A large body, its parsed copies and buffers were freed into malloc's
  // arenas, which keep them (and raise the mmap threshold): give the pages
  // back, so a few big requests do not ratchet the resident size up.
  if (large) ::malloc_trim(0);
}

void ServerCore::check_deadlines(Clock::time_point now) {
  std::vector<Connection*> expired;
  for (auto& [fd, c] : conns_)
    if (c->state != Connection::State::kBusy && c->deadline <= now) expired.push_back(c.get());
  for (Connection* c : expired) {
    if (c->state == Connection::State::kReading && c->parser.started()) {
      ++timed_out_;
      c->out.clear();
      c->out_off = 0;
      const int fd = c->fd;
      queue_reply(c, error_page_(408, "the request was not received in time"), true);  // may close c
      auto it = conns_.find(fd);
      if (it != conns_.end() && it->second->state == Connection::State::kWriting)
        close_conn(it->second.get());  // no second chance for a client that does not read either
    } else {
      close_conn(c);
    }
  }
}

bool ServerCore::write_direct(Connection* c, std::string_view data) {
  if (c->broken || force_) return false;
  const auto deadline = Clock::now() + std::chrono::milliseconds(opt_.write_timeout_ms);
  size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = ::send(c->fd, data.data() + off, data.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      const auto now = Clock::now();
      if (now >= deadline || force_) break;
      pollfd p{c->fd, POLLOUT, 0};
      ::poll(&p, 1, std::min(ms_until(deadline, now), 100));
      continue;
    }
    break;
  }
  if (off < data.size()) c->broken = true;
  return !c->broken;
}

bool ServerCore::client_gone(Connection* c) {
  if (c->broken || force_) return true;
  pollfd p{c->fd, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
  if (p.revents & POLLIN) {
    char b;
    const ssize_t n = ::recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0;  // > 0: the next pipelined request is waiting
  }
  return false;
}

void ServerCore::worker_loop() {
  while (true) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return workers_exit_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    Connection* c = job.conn;
    const bool keep_alive = job.req.keep_alive && !c->peer_eof && !stopping_;
    Responder r(this, c, true, job.req.method == "HEAD", keep_alive, job.req.version_minor);
    if (force_) {
      c->broken = true;
    } else {
      handler_(job.req, r);
      if (!r.responded()) r.send(error_page_(500, "the handler sent no reply"));
      if (r.streaming_ && !r.ended_) c->broken = true;  // an unfinished stream cannot be reused
    }
    c->close_after_write = !r.keep_alive_;
    job.req = Request{};
    {
      std::lock_guard<std::mutex> lock(mu_);
      returned_.push_back(c);
    }
    wake();
  }
}

bool ServerCore::run() {
  if (listen_fd_ < 0) return false;
  std::vector<std::thread> workers;
  for (int i = 0; i < std::max(1, opt_.num_threads); ++i) workers.emplace_back([this] { worker_loop(); });
  bool stop_seen = false;
  Clock::time_point grace_end;
  epoll_event events[256];
  while (true) {
    const auto now = Clock::now();
    if (stopping_ && !stop_seen) {
      stop_seen = true;
      grace_end = now + std::chrono::milliseconds(opt_.shutdown_grace_ms);
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr);
      ::close(listen_fd_);
      listen_fd_ = -1;
      std::vector<Connection*> idle;
      for (auto& [fd, c] : conns_)
        if (c->state != Connection::State::kBusy) idle.push_back(c.get());
      for (Connection* c : idle) close_conn(c);
    }
    if (stop_seen) {
      if (busy_ == 0) break;
      if (now >= grace_end && !force_) {
        // Grace over: break every handler's connection so it ends now.
        force_ = true;
        for (auto& [fd, c] : conns_)
          if (c->state == Connection::State::kBusy) ::shutdown(fd, SHUT_RDWR);
      }
    }
    const int n = ::epoll_wait(epoll_fd_, events, 256, 100);
    if (n < 0 && errno != EINTR) break;
    for (int i = 0; i < n; ++i) {
      const uint64_t key = events[i].data.u64;
      const auto gen = static_cast<uint32_t>(key >> 32);
      const auto fd = static_cast<int>(static_cast<uint32_t>(key));
      if (gen == 0 && fd == listen_fd_) {
        accept_all();
        continue;
      }
      if (gen == 0 && fd == wake_fd_) {
        uint64_t v;
        while (::read(wake_fd_, &v, sizeof(v)) > 0) {
        }
        continue;
      }
      auto it = conns_.find(fd);
      if (it == conns_.end() || it->second->gen != gen) continue;  // closed, or the descriptor was reused
      Connection* c = it->second.get();
      if (c->state == Connection::State::kReading) {
        on_readable(c);
      } else if (c->state == Connection::State::kLingering) {
        drain(c);
      } else if (c->state == Connection::State::kWriting) {
        if (events[i].events & (EPOLLERR | EPOLLHUP)) {
          close_conn(c);
        } else if (flush(c) == Flush::kDone) {
          resume(c);
        }
      }
    }
    take_returned();
    check_deadlines(Clock::now());
    if (accept_paused_ && listen_fd_ >= 0 && Clock::now() >= accept_paused_until_) {
      accept_paused_ = false;
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.fd = listen_fd_;
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    workers_exit_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers) t.join();
  take_returned();
  std::vector<Connection*> rest;
  for (auto& [fd, c] : conns_) rest.push_back(c.get());
  for (Connection* c : rest) close_conn(c);
  return true;
}

HttpServer::HttpServer(ServerOptions options, Handler handler, QuickPredicate quick, ErrorPage error_page)
    : core_(std::make_unique<ServerCore>(std::move(options), std::move(handler), std::move(quick),
                                         std::move(error_page))) {}
HttpServer::~HttpServer() = default;
Result<int> HttpServer::bind() { return core_->bind(); }
bool HttpServer::run() { return core_->run(); }
void HttpServer::stop() { core_->stop(); }
ServerStats HttpServer::stats() const { return core_->stats(); }

}  // namespace pagoda::http
