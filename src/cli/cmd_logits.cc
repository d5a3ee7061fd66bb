// `pagoda logits`: evaluates token ids as one prompt (no BOS added) and writes
// the logits of every position as raw little-endian float32, n_tokens x
// n_vocab (the format of llama.cpp's logits dumps and of the architecture
// fixtures).
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "engine/prompt_logits.h"

namespace pagoda::cli {
namespace {

int fail(const std::string& msg) { return cli::fail("logits", msg); }

}  // namespace

int cmd_logits(int argc, char** argv) {
  CLI::App app("Logits of every position of a prompt given as token ids", "logits");
  std::string model = default_model_path(), ids_text, out_path;
  int32_t threads = 0;
  app.add_option("-m,--model", model, "GGUF model file")->capture_default_str();
  app.add_option("--ids", ids_text, "token ids separated by spaces or commas")->required();
  app.add_option("-o,--output", out_path, "output file (raw float32, n_tokens x n_vocab)")->required();
  app.add_option("-t,--threads", threads, "threads (default: physical cores)")->check(CLI::Range(0, 1024));
  int32_t tp = 1, pp = 1;
  add_tp_option(app, &tp, &pp);
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;
  TpSession tp_session;
  auto comm = start_tensor_parallel(tp, pp);
  if (!comm) return fail(comm.status().message());

  std::vector<int32_t> ids;
  for (char& ch : ids_text)
    if (ch == ',') ch = ' ';
  std::istringstream in(ids_text);
  std::string word;
  while (in >> word) {
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(word, &used);
    } catch (...) {
      used = 0;
    }
    if (used != word.size() || v < 0 || v > INT32_MAX) return fail("'" + word + "' is not a token id");
    ids.push_back(static_cast<int32_t>(v));
  }
  if (ids.empty()) return fail("--ids holds no token id");
  auto runner = make_logits_runner(model, static_cast<int32_t>(ids.size()), threads, *comm, pp);
  if (!runner) return fail(runner.status().message());
  if (*comm && (*comm)->rank() != 0) {
    const Status st = runner->runner->serve_tensor_parallel();
    return st.is_ok() ? 0 : fail(st.message());
  }
  auto logits = prompt_logits(*runner->runner, ids);
  if (!logits) return fail(logits.status().message());
  FILE* f = std::fopen(out_path.c_str(), "wb");
  if (!f) return fail("cannot write '" + out_path + "'");
  const size_t n = logits->size();
  const bool ok = std::fwrite(logits->data(), sizeof(float), n, f) == n;
  if (std::fclose(f) != 0 || !ok) return fail("cannot write '" + out_path + "'");
  std::fprintf(stderr, "pagoda logits: %zu tokens x %d vocab -> %s\n", ids.size(), runner->runner->config().vocab_size,
               out_path.c_str());
  return 0;
}

}  // namespace pagoda::cli
