// Reading the real GGUF files in the shared folder, and open() errors.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "../shared_files.h"
#include "gguf/gguf_file.h"

namespace pagoda::gguf {
namespace {

const std::string kShared = PAGODA_SHARED_DIR;

TEST(GGUFRealFiles, Stories260K) {
  PAGODA_SKIP_WITHOUT_SHARED("models/stories260K.gguf");
  const std::string path = kShared + "/models/stories260K.gguf";
  auto r = GGUFFile::open(path);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const GGUFFile& f = *r.value();
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.metadata().size(), 19u);
  EXPECT_EQ(f.tensors().size(), 48u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_int("llama.embedding_length"), 64);
  EXPECT_EQ(f.get_int("llama.context_length"), 512);
  EXPECT_EQ(f.get_int("llama.block_count"), 5);
  const auto* tokens = f.get_string_array("tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  EXPECT_EQ(tokens->size(), 512u);

  const size_t file_size = std::filesystem::file_size(path);
  const TensorInfo* emb = f.tensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->dims, (std::vector<int64_t>{64, 512}));
  EXPECT_EQ(emb->num_elements(), 64 * 512);
  EXPECT_GT(emb->num_bytes, 0u);
  // Every tensor's data lies inside the file, past the directory.
  uint64_t total = 0;
  for (const TensorInfo& t : f.tensors()) {
    EXPECT_LE(f.data_offset() + t.offset + t.num_bytes, file_size) << t.name;
    total += t.num_bytes;
  }
  EXPECT_LE(total, file_size);
  EXPECT_GT(total, file_size / 2);  // a weights file is mostly data
}

TEST(GGUFRealFiles, VocabFiles) {
  PAGODA_SKIP_WITHOUT_SHARED("vocab");
  int num_files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kShared + "/vocab")) {
    if (entry.path().extension() != ".gguf") continue;
    ++num_files;
    SCOPED_TRACE(entry.path().string());
    auto r = GGUFFile::open(entry.path().string());
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    const GGUFFile& f = *r.value();
    EXPECT_TRUE(f.version() == 2 || f.version() == 3);
    EXPECT_LE(f.tensors().size(), 4u);
    EXPECT_TRUE(f.get_string("tokenizer.ggml.model").has_value());
    const auto* tokens = f.get_string_array("tokenizer.ggml.tokens");
    ASSERT_NE(tokens, nullptr);
    EXPECT_GT(tokens->size(), 1000u);
  }
  EXPECT_GE(num_files, 5);
}

// The bundled models name their pre-tokenizer as llama.cpp does ("gpt-2";
// llama.cpp refuses "gpt2"), so llama.cpp loads them too.
TEST(GGUFRealFiles, BundledModelsUseLlamaCppsPreTokenizerName) {
  for (const char* name : {"pagoda-small.gguf", "pagoda-small-draft.gguf"}) {
    auto f = GGUFFile::open(std::string(PAGODA_SOURCE_DIR) + "/models/" + name);
    ASSERT_TRUE(f.is_ok()) << f.status().message();
    EXPECT_EQ((*f)->get_string("tokenizer.ggml.pre").value_or(""), "gpt-2") << name;
  }
}

// A FIFO is refused at once (opening it must not wait for a writer).
TEST(GGUFRealFiles, FifoIsRefusedWithoutBlocking) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("pagoda_fifo_" + std::to_string(::getpid()) + ".gguf")).string();
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  auto f = GGUFFile::open(path);
  std::filesystem::remove(path);
  ASSERT_FALSE(f.is_ok());
  EXPECT_NE(f.status().message().find("not a regular file"), std::string::npos) << f.status().message();
}

TEST(GGUFRealFiles, MissingFile) {
  auto r = GGUFFile::open("/nonexistent/pagoda/model.gguf");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("/nonexistent/pagoda/model.gguf"), std::string::npos);
  EXPECT_NE(r.status().message().find("No such file"), std::string::npos) << r.status().message();
}

TEST(GGUFRealFiles, DirectoryIsAnError) {
  const std::string dir = std::filesystem::temp_directory_path().string();
  auto r = GGUFFile::open(dir);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find(dir), std::string::npos);
  EXPECT_NE(r.status().message().find("directory"), std::string::npos) << r.status().message();
}

TEST(GGUFRealFiles, NonGGUFFileIsAnError) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("pagoda_README_" + std::to_string(::getpid()) + ".md")).string();
  std::ofstream(path) << "# Models\n\nNot a GGUF file, but long enough to hold a header.\n";
  auto r = GGUFFile::open(path);
  std::filesystem::remove(path);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("magic"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace pagoda::gguf
