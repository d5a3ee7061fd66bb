#include "bench_client/stream_client.h"

#include <algorithm>

namespace pagoda::bench {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

httplib::Headers auth_headers(const ClientOptions& o) {
  httplib::Headers h;
  if (!o.api_key.empty()) h.emplace("Authorization", "Bearer " + o.api_key);
  return h;
}

// The "error.message" of an OpenAI-style error body, else the body itself.
std::string error_message(const std::string& body) {
  std::string msg = body.substr(0, 300);
  try {
    const json j = json::parse(body);
    if (j.contains("error") && j["error"].is_object() && j["error"].contains("message"))
      msg = j["error"]["message"].get<std::string>();
    else if (j.contains("error") && j["error"].is_string())
      msg = j["error"].get<std::string>();
  } catch (const json::exception&) {
  }
  return msg;
}

std::string error_text(int status, const std::string& body) {
  const std::string msg = error_message(body);
  return "HTTP " + std::to_string(status) + (msg.empty() ? "" : ": " + msg);
}

// Splits an SSE byte stream into the payloads of its "data:" lines.
class SseReader {
 public:
  template <typename Fn>
  void feed(const char* data, size_t n, Fn&& on_data) {
    for (size_t i = 0; i < n; ++i) {
      const char c = data[i];
      if (c == '\r') continue;
      if (c != '\n') {
        line_ += c;
        continue;
      }
      if (line_.rfind("data:", 0) == 0) {
        std::string_view payload(line_);
        payload.remove_prefix(5);
        if (!payload.empty() && payload.front() == ' ') payload.remove_prefix(1);
        on_data(payload);
      }
      line_.clear();
    }
  }

 private:
  std::string line_;
};

// The text of one streamed chunk ("" for role-only, usage or finish chunks).
std::string chunk_text(const json& chunk, Endpoint endpoint) {
  if (!chunk.contains("choices") || !chunk["choices"].is_array()) return {};
  std::string out;
  for (const json& choice : chunk["choices"]) {
    if (!choice.is_object()) continue;
    if (endpoint == Endpoint::kCompletions) {
      if (choice.contains("text") && choice["text"].is_string()) out += choice["text"].get<std::string>();
      continue;
    }
    if (!choice.contains("delta") || !choice["delta"].is_object()) continue;
    const json& d = choice["delta"];
    for (const char* key : {"content", "reasoning_content"})
      if (d.contains(key) && d[key].is_string()) out += d[key].get<std::string>();
  }
  return out;
}

}  // namespace

Result<BaseUrl> parse_base_url(const std::string& url) {
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos)
    return Status(StatusCode::kInvalidArgument, "--base-url '" + url + "' must look like http://host:port");
  const std::string scheme = url.substr(0, scheme_end);
  if (scheme != "http" && scheme != "https")
    return Status(StatusCode::kInvalidArgument, "--base-url '" + url + "': the scheme must be http or https");
  const size_t host_begin = scheme_end + 3;
  const size_t slash = url.find('/', host_begin);
  BaseUrl out;
  out.scheme_host_port = url.substr(0, slash);
  if (out.scheme_host_port.size() == host_begin)
    return Status(StatusCode::kInvalidArgument, "--base-url '" + url + "' has no host");
  std::string path = slash == std::string::npos ? "" : url.substr(slash);
  while (!path.empty() && path.back() == '/') path.pop_back();
  if (path.size() >= 3 && path.compare(path.size() - 3, 3, "/v1") == 0) path.resize(path.size() - 3);
  out.path_prefix = path;
  return out;
}

std::unique_ptr<httplib::Client> make_client(const ClientOptions& o) {
  auto c = std::make_unique<httplib::Client>(o.url.scheme_host_port);
  const auto timeout = static_cast<time_t>(std::max(1.0, o.timeout_s));
  c->set_connection_timeout(std::min<time_t>(timeout, 30), 0);
  c->set_read_timeout(timeout, 0);
  c->set_write_timeout(timeout, 0);
  c->set_keep_alive(true);
  c->set_default_headers(auth_headers(o));
  return c;
}

Result<std::string> fetch_first_model(const ClientOptions& o) {
  auto client = make_client(o);
  if (!client->is_valid()) return Status(StatusCode::kInvalidArgument, "invalid --base-url " + o.url.scheme_host_port);
  const std::string where = o.url.scheme_host_port + o.url.path_prefix + "/v1/models";
  auto res = client->Get((o.url.path_prefix + "/v1/models").c_str());
  if (!res) return Status(StatusCode::kUnavailable, "cannot reach " + where + ": " + httplib::to_string(res.error()));
  if (res->status != 200)
    return Status(StatusCode::kUnavailable, "GET " + where + ": " + error_text(res->status, res->body));
  try {
    const json j = json::parse(res->body);
    if (j.contains("data") && j["data"].is_array() && !j["data"].empty() && j["data"][0].contains("id"))
      return j["data"][0]["id"].get<std::string>();
  } catch (const json::exception&) {
  }
  return Status(StatusCode::kUnavailable, "GET " + where + " did not list a model; pass --model");
}

json request_body(const StreamRequest& r) {
  json body = {{"model", r.model},
               {"max_tokens", r.max_tokens},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}},
               {"temperature", 0.0}};
  if (r.endpoint == Endpoint::kChat)
    body["messages"] = r.messages;
  else
    body["prompt"] = r.prompt;
  if (r.ignore_eos) body["ignore_eos"] = true;
  return body;
}

void run_stream_request(httplib::Client& client, const ClientOptions& o, const StreamRequest& r,
                        Clock::time_point bench_start, RequestRecord* rec) {
  rec->max_tokens = r.max_tokens;
  httplib::Request req;
  req.method = "POST";
  req.path = o.url.path_prefix + (r.endpoint == Endpoint::kChat ? "/v1/chat/completions" : "/v1/completions");
  req.headers = auth_headers(o);
  req.set_header("Content-Type", "application/json");
  req.set_header("Accept", "text/event-stream");
  req.set_header("Accept-Encoding", "identity");
  req.body = request_body(r).dump();

  int status = 0;
  std::string error_body;
  bool done = false;
  bool usage_seen = false;
  int32_t text_chunks = 0;
  Clock::time_point last;
  SseReader sse;
  const Clock::time_point t0 = Clock::now();
  rec->start_s = seconds(bench_start, t0);
  req.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (status != 200) {
      if (error_body.size() < 4096) error_body.append(data, n);
      return true;
    }
    const Clock::time_point now = Clock::now();
    sse.feed(data, n, [&](std::string_view payload) {
      if (payload == "[DONE]") {
        done = true;
        return;
      }
      json chunk;
      try {
        chunk = json::parse(payload);
      } catch (const json::exception&) {
        if (rec->error.empty()) rec->error = "a stream chunk is not valid JSON: " + std::string(payload.substr(0, 200));
        return;
      }
      if (chunk.contains("error")) {
        if (rec->error.empty()) rec->error = "stream error: " + error_message(std::string(payload));
        return;
      }
      const json* usage = chunk.contains("usage") && chunk["usage"].is_object() ? &chunk["usage"] : nullptr;
      if (usage && usage->contains("completion_tokens") && (*usage)["completion_tokens"].is_number_integer()) {
        rec->output_tokens = (*usage)["completion_tokens"].get<int32_t>();
        usage_seen = true;
      }
      if (usage && usage->contains("prompt_tokens") && (*usage)["prompt_tokens"].is_number_integer())
        rec->prompt_tokens = (*usage)["prompt_tokens"].get<int32_t>();
      const std::string text = chunk_text(chunk, r.endpoint);
      if (text.empty()) return;
      if (text_chunks == 0)
        rec->ttft_s = seconds(t0, now);
      else
        rec->itl_s.push_back(seconds(last, now));
      last = now;
      ++text_chunks;
      rec->text += text;
    });
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool sent = client.send(req, res, err);
  rec->e2e_s = seconds(t0, Clock::now());
  if (!sent && status == 0) {
    rec->error = "cannot reach " + o.url.scheme_host_port + req.path + ": " + httplib::to_string(err);
  } else if (status != 200) {
    rec->error = error_text(status, error_body);
  } else if (!sent && rec->error.empty()) {
    rec->error = "the stream broke: " + httplib::to_string(err);
  } else if (!done && rec->error.empty()) {
    rec->error = "the stream ended without 'data: [DONE]'";
  }
  if (!usage_seen) rec->output_tokens = text_chunks;
  if (rec->error.empty() && text_chunks == 0) rec->error = "the server streamed no text";
  rec->ok = rec->error.empty();
}

}  // namespace pagoda::bench
