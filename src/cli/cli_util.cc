#include "cli/cli_util.h"

#include <filesystem>
#include <unistd.h>

namespace pagoda::cli {

int parse_or_exit(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "pagoda %s: error: %s\nRun 'pagoda %s --help' for usage.\n", app.get_name().c_str(),
                 e.what(), app.get_name().c_str());
    return 2;
  }
  return -1;
}

std::string default_model_path() {
  namespace fs = std::filesystem;
  const char* rel = "models/pagoda-small.gguf";
  std::error_code ec;
  // Next to the executable's repository (build/pagoda -> ../models), then cwd.
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (fs::path dir = exe.parent_path(); !dir.empty() && dir != dir.root_path(); dir = dir.parent_path()) {
      if (fs::exists(dir / rel, ec)) return (dir / rel).string();
    }
  }
  return rel;
}

void add_kv_dtype_option(CLI::App& app, std::string* name) {
  app.add_option("--kv-cache-dtype", *name, "KV cache element type (f16: half the memory)")
      ->check(CLI::IsMember({"f32", "f16"}))
      ->capture_default_str();
}

DType kv_dtype(const std::string& name) { return name == "f16" ? DType::kF16 : DType::kF32; }

}  // namespace pagoda::cli
