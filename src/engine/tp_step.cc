#include "engine/tp_step.h"

#include <cstring>
#include <string>
#include <type_traits>

namespace pagoda {

namespace {

void append(std::vector<uint8_t>* out, const void* p, size_t n) {
  if (n == 0) return;
  const size_t old = out->size();
  out->resize(old + n);
  std::memcpy(out->data() + old, p, n);
}

template <class T>
void put(std::vector<uint8_t>* out, const T& v) {
  static_assert(std::is_trivially_copyable_v<T>);
  append(out, &v, sizeof v);
}

template <class T>
void put_vec(std::vector<uint8_t>* out, std::span<const T> v) {
  put<uint64_t>(out, v.size());
  append(out, v.data(), v.size_bytes());
}

// The fields of a SeqSlice that travel (its table travels separately).
struct SliceRecord {
  int32_t token_begin, num_tokens, kv_len, compress_to, kv_window, kv_pool, tree_begin, state_slot;
  uint8_t accumulate_scores;
  uint8_t pad[3];
};

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> b) : b_(b) {}
  template <class T>
  bool get(T* v) {
    if (b_.size() - off_ < sizeof(T)) return false;
    std::memcpy(v, b_.data() + off_, sizeof(T));
    off_ += sizeof(T);
    return true;
  }
  template <class T>
  bool get_vec(std::vector<T>* v, uint64_t max_items) {
    uint64_t n = 0;
    if (!get(&n) || n > max_items || n > (b_.size() - off_) / sizeof(T)) return false;
    v->resize(n);
    if (n > 0) std::memcpy(v->data(), b_.data() + off_, n * sizeof(T));
    off_ += n * sizeof(T);
    return true;
  }
  bool done() const { return off_ == b_.size(); }

 private:
  std::span<const uint8_t> b_;
  size_t off_ = 0;
};

}  // namespace

void encode_tp_step(const StepCopies& c, const ForwardBatch& batch, int32_t block_size, std::vector<uint8_t>* out) {
  out->clear();
  put_vec<BlockCopy>(out, c.evict_cow);
  put_vec<KeyShift>(out, c.key_shifts);
  put_vec<BlockCopy>(out, c.swap_out);
  put_vec<BlockCopy>(out, c.swap_in);
  put_vec<BlockCopy>(out, c.cow);
  put_vec<int32_t>(out, batch.tokens);
  put_vec<int32_t>(out, batch.positions);
  put_vec<int32_t>(out, batch.cache_positions);
  put_vec<int64_t>(out, batch.slots);
  put_vec<int32_t>(out, batch.logit_rows);
  put_vec<uint64_t>(out, batch.tree_masks);
  put_vec<uint8_t>(out, batch.skip_layers);
  put<uint64_t>(out, batch.seqs.size());
  for (const SeqSlice& s : batch.seqs) {
    SliceRecord r{s.token_begin, s.num_tokens, s.kv_len,
                  s.compress_to, s.kv_window,  s.kv_pool,
                  s.tree_begin,  s.state_slot, s.accumulate_scores ? uint8_t{1} : uint8_t{0},
                  {0, 0, 0}};
    put(out, r);
    const int32_t nb = (s.kv_len + block_size - 1) / block_size;
    put_vec<BlockId>(out, std::span<const BlockId>(s.block_table, static_cast<size_t>(nb)));
  }
}

Status decode_tp_step(std::span<const uint8_t> bytes, int32_t block_size, int32_t num_blocks, int32_t num_host_blocks,
                      int32_t num_layers, TpStep* out) {
  Reader r(bytes);
  const uint64_t big = bytes.size();
  ForwardBatch& b = out->batch;
  b.clear();
  auto bad = [](const std::string& what) {
    return Status(StatusCode::kInvalidArgument, "malformed tensor-parallel step message: " + what);
  };
  if (!r.get_vec(&out->evict_cow, big) || !r.get_vec(&out->key_shifts, big) || !r.get_vec(&out->swap_out, big) ||
      !r.get_vec(&out->swap_in, big) || !r.get_vec(&out->cow, big) || !r.get_vec(&b.tokens, big) ||
      !r.get_vec(&b.positions, big) || !r.get_vec(&b.cache_positions, big) || !r.get_vec(&b.slots, big) ||
      !r.get_vec(&b.logit_rows, big) || !r.get_vec(&b.tree_masks, big) || !r.get_vec(&b.skip_layers, big))
    return bad("truncated");
  auto in = [](BlockId id, int32_t n) { return id.value >= 0 && id.value < n; };
  for (const auto* list : {&out->evict_cow, &out->cow})
    for (const BlockCopy& c : *list)
      if (!in(c.src, num_blocks) || !in(c.dst, num_blocks)) return bad("block copy out of range");
  for (const BlockCopy& c : out->swap_out)
    if (!in(c.src, num_blocks) || !in(c.dst, num_host_blocks)) return bad("swap-out copy out of range");
  for (const BlockCopy& c : out->swap_in)
    if (!in(c.src, num_host_blocks) || !in(c.dst, num_blocks)) return bad("swap-in copy out of range");
  for (const KeyShift& k : out->key_shifts)
    if (!in(k.block, num_blocks)) return bad("key shift out of range");
  const size_t n = b.tokens.size();
  if (b.positions.size() != n || b.slots.size() != n || (!b.cache_positions.empty() && b.cache_positions.size() != n) ||
      (!b.tree_masks.empty() && b.tree_masks.size() != n))
    return bad("per-token arrays of different lengths");
  if (!b.skip_layers.empty() && static_cast<int64_t>(b.skip_layers.size()) < num_layers) return bad("skip list");
  for (int64_t s : b.slots)
    if (s < 0 || s >= int64_t{num_blocks} * block_size) return bad("KV slot out of range");
  for (int32_t row : b.logit_rows)
    if (row < 0 || static_cast<size_t>(row) >= n) return bad("logit row out of range");
  uint64_t num_seqs = 0;
  if (!r.get(&num_seqs) || num_seqs > n) return bad("slice count");
  out->tables.resize(num_seqs);
  size_t covered = 0;
  for (uint64_t i = 0; i < num_seqs; ++i) {
    SliceRecord rec{};
    std::vector<BlockId>& table = out->tables[i];
    if (!r.get(&rec) || !r.get_vec(&table, big)) return bad("truncated slice");
    if (rec.token_begin != static_cast<int32_t>(covered) || rec.num_tokens < 0 ||
        static_cast<size_t>(rec.num_tokens) > n - covered || rec.kv_len < rec.num_tokens ||
        static_cast<int64_t>(table.size()) * block_size < rec.kv_len)
      return bad("slice " + std::to_string(i) + " does not fit the batch or its table");
    for (BlockId id : table)
      if (!in(id, num_blocks)) return bad("block table entry out of range");
    if (rec.tree_begin < 0 || rec.tree_begin > rec.kv_len || rec.compress_to != 0 || rec.accumulate_scores != 0 ||
        rec.state_slot != -1)
      return bad("slice " + std::to_string(i) + " asks for what tensor parallelism does not run");
    for (size_t t = covered; t < covered + static_cast<size_t>(rec.num_tokens); ++t) {
      const int32_t p = b.cache_positions.empty() ? b.positions[t] : b.cache_positions[t];
      if (p < 0 || p >= rec.kv_len) return bad("a token's cache position is outside its slice");
    }
    covered += static_cast<size_t>(rec.num_tokens);
    SeqSlice s;
    s.token_begin = rec.token_begin;
    s.num_tokens = rec.num_tokens;
    s.kv_len = rec.kv_len;
    s.block_table = table.data();
    s.compress_to = rec.compress_to;
    s.accumulate_scores = rec.accumulate_scores != 0;
    s.kv_window = rec.kv_window;
    s.kv_pool = rec.kv_pool;
    s.tree_begin = rec.tree_begin;
    s.state_slot = rec.state_slot;
    b.seqs.push_back(s);
  }
  if (covered != n || !r.done()) return bad("trailing or uncovered tokens");
  return Status::ok();
}

}  // namespace pagoda
