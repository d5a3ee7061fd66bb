// Test helpers shared by the test folders that drive processes or files:
// a shell command's exit code, stdout and stderr; a temporary folder.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>

namespace pagoda::testing_util {

struct RunResult {
  int exit_code = -1;  // -1 if killed by a signal
  std::string out, err;
};

// Runs `cmd` through the shell with stdin_text on its standard input.
inline RunResult run_command(const std::string& cmd, const std::string& stdin_text = "") {
  const auto dir = std::filesystem::temp_directory_path();
  const std::string err_path = (dir / ("pagoda_cmd_err_" + std::to_string(::getpid()))).string();
  const std::string in_path = (dir / ("pagoda_cmd_in_" + std::to_string(::getpid()))).string();
  std::ofstream(in_path) << stdin_text;
  RunResult r;
  FILE* p = popen((cmd + " <" + in_path + " 2>" + err_path).c_str(), "r");
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream e(err_path);
  std::stringstream ss;
  ss << e.rdbuf();
  r.err = ss.str();
  std::error_code ec;
  std::filesystem::remove(err_path, ec);
  std::filesystem::remove(in_path, ec);
  return r;
}

// A fresh folder under the system's temporary directory, removed at the end.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& stem = "pagoda-test") {
    static int n = 0;
    path =
        std::filesystem::temp_directory_path() / (stem + "-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

}  // namespace pagoda::testing_util
