// Runs the choices of one HTTP request on the AsyncEngine: submit all (the n
// choices of one prompt are one engine request, forked after the prompt so
// they share its KV blocks), then collect them (non-streaming) or hand each output to a
// callback as it arrives (streaming), aborting everything when the client
// goes away so its KV blocks are freed.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "engine/async_engine.h"
#include "server/metrics.h"
#include "server/response_format.h"

namespace pagoda::server {

// One engine request: choices [first_index, first_index + n) of the reply.
struct ChoiceStream {
  std::shared_ptr<RequestStream> stream;
  int32_t first_index = 0;
  int32_t n = 1;
};
using Streams = std::vector<ChoiceStream>;

// Total number of choices over all streams.
int32_t num_choices(const Streams& streams);

// Submits in order (each spec is one prompt with its spec.n choices); on the
// first failure aborts the ones already queued and returns that error.
Result<Streams> submit_choices(AsyncEngine& engine, std::vector<RequestSpec> specs);

// Blocks until every choice has finished (choice i gets index i), asking
// alive() at most every 100 ms; when it says the client is gone, aborts the
// unfinished choices (freeing their KV blocks) and returns nullopt.
std::optional<std::vector<ChoiceResult>> collect_choices(AsyncEngine& engine, const Streams& streams,
                                                         ServerMetrics& metrics, const std::function<bool()>& alive);

struct StreamCallbacks {
  // An output of choice `index`; false = the client is gone.
  std::function<bool(int32_t index, const RequestOutput& out)> on_output;
  // Nothing arrived for idle_ms; false = the client is gone.
  std::function<bool()> on_idle;
  int idle_ms = 1000;
};

// Forwards outputs until every choice has finished (true), or a callback
// reports the client gone (false): then aborts the unfinished choices.
bool stream_choices(AsyncEngine& engine, const Streams& streams, ServerMetrics& metrics, const StreamCallbacks& cb);

// Aborts unfinished streams and drains them (records them in the metrics).
void abort_choices(AsyncEngine& engine, const Streams& streams, const std::vector<bool>& finished,
                   ServerMetrics& metrics);

}  // namespace pagoda::server
