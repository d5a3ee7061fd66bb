// `pagoda router --prefill URL... --decode URL...`: the OpenAI endpoint of a
// prefill/decode disaggregated deployment (router/router.h).
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <thread>

#include "cli_util.h"
#include "commands.h"
#include "router/router.h"

namespace pagoda::cli {

int cmd_router(int argc, char** argv) {
  CLI::App app("OpenAI endpoint in front of `pagoda serve --role prefill` and `--role decode` instances", "router");
  router::RouterConfig rc;
  app.add_option("--host", rc.host, "address to listen on")->capture_default_str();
  app.add_option("--port", rc.port, "port (0: any free one)")->capture_default_str()->check(CLI::Range(0, 65535));
  app.add_option("--prefill", rc.prefill, "a prefill instance, http://host:port (repeatable)")->required();
  app.add_option("--decode", rc.decode, "a decode instance, http://host:port (repeatable)")->required();
  app.add_option("--http-threads", rc.num_http_threads, "requests handled at once")->capture_default_str();
  if (int code = parse_or_exit(app, argc, argv); code >= 0) return code;
  // Signals go to one waiting thread; every thread started below inherits the mask.
  const sigset_t sigs = block_shutdown_signals();
  auto r = router::Router::create(rc);
  if (!r) return fail("router", r.status().message());
  auto port = (*r)->bind();
  if (!port) return fail("router", port.status().message());
  std::fprintf(stderr, "pagoda router: %zu prefill and %zu decode instances, listening on http://%s:%d\n",
               rc.prefill.size(), rc.decode.size(), rc.host.c_str(), *port);
  std::atomic<bool> done{false};
  router::Router& router = **r;
  std::thread waiter([&] {
    const timespec tick{0, 200 * 1000 * 1000};
    while (!done) {
      const int sig = sigtimedwait(&sigs, nullptr, &tick);
      if (sig != SIGINT && sig != SIGTERM) continue;
      std::fprintf(stderr, "pagoda router: shutting down\n");
      router.stop();
      return;
    }
  });
  const bool ok = router.listen();
  done = true;
  waiter.join();
  return ok ? 0 : 1;
}

}  // namespace pagoda::cli
