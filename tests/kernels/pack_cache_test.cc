// The pack cache (kernels::PackCacheSpec): a second pack() of the same
// weights maps the file the first one wrote and gets the same bytes; a
// different identity, another shape, a truncated or corrupted file, or an
// unwritable directory never feeds wrong bytes or crashes — the weights are
// packed again (and the cache rewritten where it can be).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/pack.h"
#include "kernels/packed.h"
#include "kernels/ref/quant_ref.h"

namespace pagoda::kernels {
namespace {

namespace fs = std::filesystem;

struct Matrix {
  std::vector<uint8_t> data;
  WeightView view;
};

Matrix make(DType t, int64_t n_in, int64_t n_out, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  Matrix m;
  const size_t rb = dtype_row_bytes(t, n_in);
  m.data.resize(rb * n_out);
  std::vector<float> f(n_in);
  for (int64_t r = 0; r < n_out; ++r) {
    for (auto& v : f) v = nd(rng);
    ref::quantize_row(t, f.data(), m.data.data() + r * rb, n_in);
  }
  m.view = {t, m.data.data(), n_in, n_out};
  return m;
}

// Three matrices of different kinds and awkward shapes.
struct Model {
  Matrix a = make(DType::kQ4_0, 96, 35, 1);
  Matrix b = make(DType::kF16, 40, 17, 2);
  Matrix c = make(DType::kQ6_K, 256, 16, 3);
  std::vector<WeightView*> views() { return {&a.view, &b.view, &c.view}; }
};

size_t group_bytes(const WeightView& w) {
  return cpu::packed_group_bytes(static_cast<cpu::WKind>(cpu::wkind_of(w.type, w.row_scaled)), w.n_in);
}

std::vector<uint8_t> packed_copy(const WeightView& w) {
  const auto* p = static_cast<const uint8_t*>(w.packed);
  const size_t n = group_bytes(w) * static_cast<size_t>((w.n_out + cpu::kPackRows - 1) / cpu::kPackRows);
  return {p, p + n};
}

class PackCache : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cpu::active_isa() == cpu::Isa::kScalar) GTEST_SKIP() << "the scalar ISA packs nothing";
    dir_ = (fs::temp_directory_path() / ("pagoda_pack_cache_" + std::to_string(::getpid()))).string();
    fs::remove_all(dir_);
    spec_ = {dir_, "model", "identity-1"};
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Packs a fresh Model with `spec`; returns its packed bytes per matrix.
  std::vector<std::vector<uint8_t>> pack(const PackCacheSpec& spec, bool* from_cache) {
    Model m;
    PackedWeights store;
    ThreadPool pool(2);
    auto vs = m.views();
    const size_t bytes = store.pack(vs.data(), static_cast<int>(vs.size()), pool, nullptr, &spec);
    EXPECT_GT(bytes, 0u);
    *from_cache = store.from_cache();
    std::vector<std::vector<uint8_t>> out;
    for (const WeightView* w : vs) {
      EXPECT_NE(w->packed, nullptr);
      out.push_back(packed_copy(*w));
    }
    return out;
  }

  std::vector<fs::path> cache_files() const {
    std::vector<fs::path> r;
    if (!fs::exists(dir_)) return r;
    for (const auto& e : fs::directory_iterator(dir_)) r.push_back(e.path());
    return r;
  }

  std::string dir_;
  PackCacheSpec spec_;
};

TEST_F(PackCache, SecondPackMapsTheFileWithTheSameBytes) {
  bool hit = true;
  const auto packed = pack({}, &hit);  // no cache at all
  EXPECT_FALSE(hit);
  EXPECT_TRUE(cache_files().empty());

  const auto first = pack(spec_, &hit);
  EXPECT_FALSE(hit);
  ASSERT_EQ(cache_files().size(), 1u);
  EXPECT_NE(cache_files()[0].filename().string().find("model."), std::string::npos);
  const auto second = pack(spec_, &hit);
  EXPECT_TRUE(hit);
  EXPECT_EQ(first, packed);
  EXPECT_EQ(second, packed);
}

TEST_F(PackCache, AnotherIdentityGetsItsOwnFile) {
  bool hit = true;
  pack(spec_, &hit);
  PackCacheSpec other = spec_;
  other.identity = "identity-2";
  pack(other, &hit);
  EXPECT_FALSE(hit);
  EXPECT_EQ(cache_files().size(), 2u);
  pack(other, &hit);
  EXPECT_TRUE(hit);
}

TEST_F(PackCache, AnotherShapeOrKindUnderTheSameIdentityGetsItsOwnFile) {
  bool hit = true;
  pack(spec_, &hit);
  Matrix m = make(DType::kQ4_0, 96, 36, 1);  // one more row than Model::a
  PackedWeights store;
  ThreadPool pool(1);
  WeightView* vs[] = {&m.view};
  store.pack(vs, 1, pool, nullptr, &spec_);
  EXPECT_FALSE(store.from_cache());
  ASSERT_NE(m.view.packed, nullptr);
  EXPECT_EQ(cache_files().size(), 2u);
  // And that file now serves that shape.
  Matrix again = make(DType::kQ4_0, 96, 36, 1);
  PackedWeights store2;
  WeightView* vs2[] = {&again.view};
  store2.pack(vs2, 1, pool, nullptr, &spec_);
  EXPECT_TRUE(store2.from_cache());
  EXPECT_EQ(packed_copy(again.view), packed_copy(m.view));
  // The same F16 matrix on the BF16 dot path is another layout: a third file.
  Model f16;
  f16.b.view.bf16_dot = true;
  WeightView* vs3[] = {&f16.b.view};
  PackedWeights store3;
  store3.pack(vs3, 1, pool, nullptr, &spec_);
  EXPECT_FALSE(store3.from_cache());
  EXPECT_EQ(cache_files().size(), has_bf16_dot() ? 3u : 2u);
}

TEST_F(PackCache, TruncatedOrCorruptedFilesAreRebuilt) {
  bool hit = true;
  const auto good = pack(spec_, &hit);
  ASSERT_EQ(cache_files().size(), 1u);
  const fs::path file = cache_files()[0];
  const auto size = fs::file_size(file);

  fs::resize_file(file, size - 100);  // truncated
  EXPECT_EQ(pack(spec_, &hit), good);
  EXPECT_FALSE(hit);
  EXPECT_EQ(fs::file_size(file), size);  // rewritten

  {  // a flipped byte in the header (the identity's first character)
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(12 + 4 + 4 + 8);
    f.put('X');
  }
  EXPECT_EQ(pack(spec_, &hit), good);
  EXPECT_FALSE(hit);

  fs::resize_file(file, 10);  // shorter than the header
  EXPECT_EQ(pack(spec_, &hit), good);
  EXPECT_FALSE(hit);
  EXPECT_EQ(pack(spec_, &hit), good);
  EXPECT_TRUE(hit);
}

TEST_F(PackCache, AnUnwritableDirectoryStillPacks) {
  fs::create_directories(dir_);
  const std::string blocker = dir_ + "/not-a-dir";
  std::ofstream(blocker) << "x";
  PackCacheSpec spec = spec_;
  spec.dir = blocker + "/cache";  // a path under a regular file
  bool hit = true;
  const auto packed = pack({}, &hit);
  EXPECT_EQ(pack(spec, &hit), packed);
  EXPECT_FALSE(hit);
  EXPECT_EQ(cache_files().size(), 1u);  // only the blocker
}

}  // namespace
}  // namespace pagoda::kernels
