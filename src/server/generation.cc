#include "server/generation.h"

#include <chrono>
#include <optional>

namespace pagoda::server {

int32_t num_choices(const Streams& streams) {
  int32_t n = 0;
  for (const auto& s : streams) n += s.n;
  return n;
}

Result<Streams> submit_choices(AsyncEngine& engine, std::vector<RequestSpec> specs) {
  Streams streams;
  int32_t index = 0;
  for (RequestSpec& spec : specs) {
    const int32_t n = spec.n;
    auto s = engine.submit(std::move(spec));
    if (!s.is_ok()) {
      for (const auto& done : streams) engine.abort(done.stream->id());
      return s.status();
    }
    streams.push_back({std::move(s).value(), index, n});
    index += n;
  }
  return streams;
}

static void accumulate(ChoiceResult& c, const RequestOutput& o) {
  if (c.finish_reason != FinishReason::kNone) return;  // already ended
  c.text += o.text;
  c.token_ids.insert(c.token_ids.end(), o.new_tokens.begin(), o.new_tokens.end());
  c.samples.insert(c.samples.end(), o.samples.begin(), o.samples.end());
  if (o.finished) {
    c.finish_reason = o.finish_reason;
    c.error = o.error;
    c.num_prompt_tokens = o.num_prompt_tokens;
    c.num_output_tokens = o.num_output_tokens;
    c.num_cached_tokens = o.num_cached_tokens;
  }
}

std::optional<std::vector<ChoiceResult>> collect_choices(AsyncEngine& engine, const Streams& streams,
                                                         ServerMetrics& metrics, const std::function<bool()>& alive) {
  std::vector<ChoiceResult> out(static_cast<size_t>(num_choices(streams)));
  for (size_t i = 0; i < out.size(); ++i) out[i].index = static_cast<int32_t>(i);
  auto last_check = std::chrono::steady_clock::now();
  StreamCallbacks cb;
  cb.idle_ms = 100;
  cb.on_output = [&](int32_t idx, const RequestOutput& o) {
    accumulate(out[static_cast<size_t>(idx)], o);
    const auto now = std::chrono::steady_clock::now();
    if (now - last_check < std::chrono::milliseconds(100)) return true;  // poll the client at most every 100 ms
    last_check = now;
    return alive();
  };
  cb.on_idle = alive;
  if (!stream_choices(engine, streams, metrics, cb)) return std::nullopt;
  for (auto& c : out)
    if (c.finish_reason == FinishReason::kNone) c.finish_reason = FinishReason::kAbort;
  return out;
}

void abort_choices(AsyncEngine& engine, const Streams& streams, const std::vector<bool>& finished,
                   ServerMetrics& metrics) {
  for (size_t i = 0; i < streams.size(); ++i)
    if (!finished[i]) engine.abort(streams[i].stream->id());
  // The engine thread ends each aborted stream promptly; bounded wait anyway.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (size_t i = 0; i < streams.size(); ++i) {
    if (finished[i]) continue;
    bool timed_out = false;
    while (std::chrono::steady_clock::now() < deadline) {
      auto o = streams[i].stream->next_for(100, &timed_out);
      if (timed_out) continue;
      if (!o) break;
      if (o->finished) metrics.on_request_finished(*o);
    }
  }
}

bool stream_choices(AsyncEngine& engine, const Streams& streams, ServerMetrics& metrics, const StreamCallbacks& cb) {
  std::vector<bool> finished(streams.size(), false);  // per engine request
  size_t num_open = streams.size();
  auto idle_since = std::chrono::steady_clock::now();
  const int wait_ms = streams.size() == 1 ? 50 : 5;
  while (num_open > 0) {
    bool got = false;
    bool waited = false;
    for (size_t i = 0; i < streams.size(); ++i) {
      if (finished[i]) continue;
      // Block (briefly) only on the first open stream when nothing came yet.
      int timeout = (!got && !waited) ? wait_ms : 0;
      waited = true;
      for (;; timeout = 0) {
        bool timed_out = false;
        auto o = streams[i].stream->next_for(timeout, &timed_out);
        if (timed_out) break;
        if (!o) {  // ended without a final output (cannot happen; be safe)
          finished[i] = true;
          --num_open;
          break;
        }
        got = true;
        if (o->finished) metrics.on_request_finished(*o);
        if (o->request_finished) {
          finished[i] = true;
          --num_open;
        }
        bool alive = true;
        if (o->request_finished && o->new_tokens.empty() && o->finish_reason != FinishReason::kNone) {
          // An engine-wide end: report it on every choice of this request.
          for (int32_t k = 0; k < streams[i].n && alive; ++k) {
            RequestOutput copy = *o;
            copy.index = k;
            alive = cb.on_output(streams[i].first_index + k, copy);
          }
        } else {
          alive = cb.on_output(streams[i].first_index + o->index, *o);
        }
        if (!alive) {
          abort_choices(engine, streams, finished, metrics);
          return false;
        }
        if (finished[i]) break;
      }
    }
    const auto now = std::chrono::steady_clock::now();
    if (got) {
      idle_since = now;
    } else if (now - idle_since >= std::chrono::milliseconds(cb.idle_ms)) {
      idle_since = now;
      if (cb.on_idle && !cb.on_idle()) {
        abort_choices(engine, streams, finished, metrics);
        return false;
      }
    }
  }
  return true;
}

}  // namespace pagoda::server
