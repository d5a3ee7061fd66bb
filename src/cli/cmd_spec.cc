// `pagoda spec build-datastore`: tokenizes a text corpus with a model's
// tokenizer and writes the suffix-array datastore that `--spec retrieval`
// proposes drafts from.
#include <cstdio>
#include <string>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "gguf/gguf_file.h"
#include "model/model_config.h"
#include "spec/datastore.h"
#include "tokenizer/tokenizer.h"

namespace pagoda::cli {
namespace {

int fail(const std::string& msg) { return cli::fail("spec build-datastore", msg); }

int build_datastore(int argc, char** argv) {
  CLI::App app("Build a retrieval datastore (suffix array over a tokenized corpus) for --spec retrieval",
               "spec build-datastore");
  std::string model = default_model_path(), path, out;
  app.add_option("-m,--model", model, "GGUF model whose tokenizer is used")->capture_default_str();
  app.add_option("-f,--file", path, "corpus text file")->required();
  app.add_option("-o,--output", out, "datastore file to write")->required();
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;
  std::string text;
  if (!read_text_file(path, &text)) return fail("cannot read '" + path + "'");
  auto file = gguf::GGUFFile::open(model);
  if (!file) return fail(file.status().message());
  auto tok = Tokenizer::from_gguf(**file);
  if (!tok) return fail(tok.status().message());
  auto config = model_config_from_gguf(**file);  // ids are checked against the model's vocabulary at load
  if (!config) return fail(config.status().message());
  auto store = Datastore::build((*tok)->encode(text, false, false), config->vocab_size);
  if (!store) return fail(store.status().message());
  if (Status st = (*store)->save(out); !st.is_ok()) return fail(st.message());
  std::fprintf(stderr, "datastore: %lld tokens -> %s\n", static_cast<long long>((*store)->num_tokens()), out.c_str());
  return 0;
}

}  // namespace

int cmd_spec(int argc, char** argv) {
  const std::string which = argc >= 2 ? argv[1] : "";
  if (which == "build-datastore") return build_datastore(argc - 1, argv + 1);
  std::fprintf(stderr, "pagoda spec: error: %s\nusage: pagoda spec build-datastore -m MODEL -f TEXT -o FILE\n",
               which.empty() ? "no tool given" : ("unknown tool '" + which + "'").c_str());
  return 2;
}

}  // namespace pagoda::cli
