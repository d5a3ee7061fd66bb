// A real `pagoda serve` child process on a free loopback port, with its
// stderr collected, plus raw-socket and /metrics helpers for the hostile suite.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../../http/raw_socket.h"

namespace pagoda::hostile {

using testing_util::Clock;
using testing_util::connect_to;
using testing_util::read_until;
using testing_util::seconds_since;
using testing_util::send_all;

class ServeProcess {
 public:
  // Starts `pagoda serve -m model --port 0 <extra>`; waits for "listening".
  ServeProcess(const std::string& model, const std::vector<std::string>& extra, bool expect_listen = true) {
    int err_pipe[2];
    EXPECT_EQ(::pipe(err_pipe), 0);
    // PAGODA_SERVE_BINARY: run the suite against another build (e.g. an older one).
    const char* bin = std::getenv("PAGODA_SERVE_BINARY");
    std::vector<std::string> args = {bin ? bin : PAGODA_BINARY, "serve", "-m", model, "--port", "0", "-t", "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(err_pipe[1], STDERR_FILENO);
      ::close(err_pipe[0]);
      ::close(err_pipe[1]);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(err_pipe[1]);
    err_fd_ = err_pipe[0];
    reader_ = std::thread([this] {
      char buf[4096];
      while (true) {
        const ssize_t n = ::read(err_fd_, buf, sizeof(buf));
        if (n <= 0) break;
        std::lock_guard<std::mutex> lock(mu_);
        stderr_.append(buf, static_cast<size_t>(n));
      }
    });
    if (!expect_listen) return;
    const auto t = Clock::now();
    static const std::regex kListening("listening on http://[^:]+:([0-9]+)");
    while (seconds_since(t) < 60 && port_ == 0 && running()) {
      std::smatch m;
      const std::string err = stderr_text();
      if (std::regex_search(err, m, kListening)) port_ = std::stoi(m[1]);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_GT(port_, 0) << stderr_text();
  }
  ~ServeProcess() {
    if (pid_ > 0 && running()) {
      ::kill(pid_, SIGKILL);
      wait_exit(10);
    }
    if (reader_.joinable()) reader_.join();
    if (err_fd_ >= 0) ::close(err_fd_);
  }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string stderr_text() {
    std::lock_guard<std::mutex> lock(mu_);
    return stderr_;
  }
  bool running() {
    if (exited_) return false;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      status_ = status;
      return false;
    }
    return true;
  }
  // Waits up to `seconds` for the process to exit; its wait status, or
  // nullopt. Once it exited, the reader has drained its stderr to the end
  // (the pipe's EOF), so stderr_text() holds its last message: reaping the
  // process can come before the reader's last read.
  std::optional<int> wait_exit(double seconds) {
    const auto t = Clock::now();
    while (running() && seconds_since(t) < seconds) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (running()) return std::nullopt;
    if (reader_.joinable()) reader_.join();
    return status_;
  }
  // Resident and peak memory (kB) from /proc.
  int64_t status_kb(const char* field) const {
    std::ifstream f("/proc/" + std::to_string(pid_) + "/status");
    std::string line;
    while (std::getline(f, line))
      if (line.rfind(field, 0) == 0) return std::atoll(line.c_str() + std::strlen(field) + 1);
    return -1;
  }

 private:
  pid_t pid_ = -1;
  int err_fd_ = -1;
  int port_ = 0;
  bool exited_ = false;
  int status_ = 0;
  std::mutex mu_;
  std::string stderr_;
  std::thread reader_;
};

// True once `buf` holds one whole response with a Content-Length body.
inline bool whole_response(const std::string& buf) {
  const size_t head_end = buf.find("\r\n\r\n");
  if (head_end == std::string::npos) return false;
  static const std::regex kLen("Content-Length: ([0-9]+)", std::regex::icase);
  std::smatch m;
  const std::string head = buf.substr(0, head_end);
  if (!std::regex_search(head, m, kLen)) return false;
  return buf.size() >= head_end + 4 + std::stoul(m[1]);
}

struct Reply {
  int status = 0;  // 0: no reply
  std::string body;
};

// One request on a fresh connection (Connection: close).
inline Reply request(int port, const std::string& method, const std::string& path, const std::string& body = "",
                     const std::string& extra_headers = "", int timeout_ms = 30000, const char* from = nullptr) {
  Reply r;
  const int fd = connect_to(port, from);
  if (fd < 0) return r;
  std::string req = method + " " + path + " HTTP/1.1\r\nHost: t\r\nConnection: close\r\n" + extra_headers;
  if (!body.empty() || method == "POST")
    req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  req += "\r\n" + body;
  send_all(fd, req);
  const std::string got = read_until(fd, whole_response, timeout_ms);
  ::close(fd);
  if (got.rfind("HTTP/1.1 ", 0) != 0) return r;
  r.status = std::atoi(got.c_str() + 9);
  const size_t head_end = got.find("\r\n\r\n");
  if (head_end != std::string::npos) r.body = got.substr(head_end + 4);
  return r;
}

// A sample of /metrics ("pagoda:name" with an optional label filter); -1 when absent.
inline double metric(int port, const std::string& name, const std::string& label = "") {
  const Reply r = request(port, "GET", "/metrics");
  std::istringstream in(r.body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("pagoda:" + name + "{", 0) != 0) continue;
    if (!label.empty() && line.find(label) == std::string::npos) continue;
    return std::atof(line.substr(line.rfind(' ') + 1).c_str());
  }
  return -1;
}

// Raises the soft descriptor limit to the hard one (children inherit it); returns it.
inline int64_t raise_fd_limit() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0) return 1024;
  if (r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &r);
  }
  return r.rlim_cur == RLIM_INFINITY ? (int64_t{1} << 20) : static_cast<int64_t>(r.rlim_cur);
}

}  // namespace pagoda::hostile
