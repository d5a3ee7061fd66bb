// Headless Chromium (Debian's, driven by playwright-core) against the chat
// page that `pagoda serve` serves at /: loads it, enters the API key, sends a
// message, waits for the streamed answer, checks it against a non-streamed
// request, sends a follow-up and stops it mid-stream, and takes a screenshot.
// Then, as a newcomer would: `pagoda serve` with the bundled (chat-tuned)
// model and the page's default settings, asks a question, gets a non-empty
// answer.
// Usage: node run_test.mjs [path/to/pagoda]. Exit 77 (ctest: skipped) when
// node_modules or chromium is missing: run `npm ci` here, install chromium.
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import assert from "node:assert/strict";
import { startServer, stopServer } from "../node/server.mjs";

const here = dirname(fileURLToPath(import.meta.url));
if (!existsSync(join(here, "node_modules", "playwright-core"))) {
  console.log("SKIP: tests/server/chat_page/node_modules is missing; run `npm ci` in tests/server/chat_page");
  process.exit(77);
}
const browserPath = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
if (!existsSync(browserPath)) {
  console.log(`SKIP: ${browserPath} is missing; install Debian's chromium (apt-get install chromium)`);
  process.exit(77);
}
const { chromium } = await import("playwright-core");

const pagoda = process.argv[2] ?? join(here, "..", "..", "..", "build", "pagoda");
const screenshot = process.env.PAGODA_SCREENSHOT ?? join(tmpdir(), "pagoda-chat-page.png");
const dir = mkdtempSync(join(tmpdir(), "pagoda-chat-page-"));
const model = join(dir, "tiny.gguf");
const made = spawnSync(pagoda, ["make-model", "--preset", "tiny", "--dtype", "f32", "--ctx", "2048", "-o", model,
                                "--threads", "1"], { stdio: "inherit" });
assert.equal(made.status, 0, "make-model failed");

const key = "sk-page";
const { server, port } = await startServer(pagoda, ["-m", model, "-t", "1", "--kv-cache-mem", "16", "--api-key", key,
                                                  "--served-model-name", "tiny"]);
const base = `http://127.0.0.1:${port}`;

// Resolves once the page is idle with a non-empty last assistant message.
const answered = (page) => page.waitForFunction(() => {
  const msgs = document.querySelectorAll("#log .assistant");
  const last = msgs[msgs.length - 1];
  return document.body.dataset.streaming === "false" && last && last.textContent.length > 0;
}, null, { timeout: 30000 });

let failed = false, context = null;
try {
  context = await chromium.launchPersistentContext(join(dir, "profile"), {
    executablePath: browserPath,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
           "--disable-component-update", "--disable-sync"],
    viewport: { width: 900, height: 600 },
  });
  const page = context.pages()[0] ?? await context.newPage();
  const pageErrors = [];
  page.on("pageerror", (e) => pageErrors.push(String(e)));

  const resp = await page.goto(base + "/");
  assert.equal(resp.status(), 200, "GET / needs no API key");
  assert.match(resp.headers()["content-type"], /text\/html/);
  await page.waitForFunction(() => document.getElementById("model").textContent.length > 0);
  assert.match(await page.textContent("#model"), /401|API key/i, "without the key /v1/models is refused");

  await page.fill("#key", key);
  await page.locator("#key").dispatchEvent("change");
  await page.waitForFunction(() => document.getElementById("model").textContent === "model: tiny");
  await page.fill("#max", "48");
  await page.fill("#temp", "0");

  // Record every distinct length the answer takes while it streams.
  await page.evaluate(() => {
    window.__lengths = [];
    window.__sawStreaming = false;
    new MutationObserver(() => {
      if (document.body.dataset.streaming === "true") window.__sawStreaming = true;
      const msgs = document.querySelectorAll("#log .assistant");
      const n = msgs.length ? msgs[msgs.length - 1].textContent.length : 0;
      if (n && window.__lengths[window.__lengths.length - 1] !== n) window.__lengths.push(n);
    }).observe(document.body, { subtree: true, childList: true, characterData: true, attributes: true });
  });
  // The tiny model answers in milliseconds: a throttled network (bytes/s)
  // makes the stream arrive over a few seconds, as from a real model.
  const cdp = await context.newCDPSession(page);
  await cdp.send("Network.enable");
  const throttle = (bps) => cdp.send("Network.emulateNetworkConditions",
                                     { offline: false, latency: 0, downloadThroughput: bps, uploadThroughput: -1 });
  await throttle(4000);
  const message = "Hello there, tell me a story";
  await page.fill("#input", message);
  await page.click("#send");
  await answered(page);
  const answer = await page.textContent("#log .assistant");
  const lengths = await page.evaluate(() => window.__lengths);
  console.log(`answer (${answer.length} chars, ${lengths.length} renders): ${JSON.stringify(answer.slice(0, 80))}`);
  assert.ok(await page.evaluate(() => window.__sawStreaming), "the page never entered the streaming state");
  assert.ok(lengths.length >= 2, `the answer was rendered in one piece (${lengths}), not streamed`);
  assert.equal(await page.textContent("#log .user"), message);

  // The same request without streaming gives the same (greedy) text.
  const ref = await fetch(base + "/v1/chat/completions", {
    method: "POST", headers: { "Content-Type": "application/json", Authorization: `Bearer ${key}` },
    body: JSON.stringify({ model: "tiny", messages: [{ role: "user", content: message }], max_tokens: 48,
                           temperature: 0 }) });
  assert.equal(ref.status, 200);
  assert.equal(answer, (await ref.json()).choices[0].message.content, "streamed answer differs from non-streamed");

  // A follow-up keeps the conversation; Stop aborts it mid-stream.
  await throttle(1000);
  await page.fill("#max", "1500");
  await page.fill("#input", "Go on");
  await page.click("#send");
  await page.waitForFunction(() => {
    const msgs = document.querySelectorAll("#log .assistant");
    return msgs.length === 2 && msgs[1].textContent.length > 0;
  }, null, { timeout: 30000 });
  await page.click("#stop");
  await answered(page);
  await throttle(-1);
  const second = await page.locator("#log .assistant").nth(1).textContent();
  assert.ok(second.endsWith("[stopped]"), `Stop did not abort the stream: ${JSON.stringify(second.slice(-60))}`);
  assert.equal(await page.locator("#log .msg").count(), 4, "two user and two assistant messages");
  assert.equal(await page.isDisabled("#send"), false);
  assert.equal(await page.isDisabled("#stop"), true);
  await page.screenshot({ path: screenshot });
  console.log(`screenshot: ${screenshot}`);
  assert.deepEqual(pageErrors, [], "JavaScript errors on the page");
  console.log("chat page: load, key, streamed answer, history, stop OK");
  await bundledModel(context);
} catch (e) {
  console.error(e);
  failed = true;
} finally {
  if (context) await context.close().catch(() => {});
}

// The bundled model through the page with its defaults (temperature 0.7,
// 256 tokens): two questions of the kinds it was tuned on, each answered.
async function bundledModel(context) {
  const bundled = join(here, "..", "..", "..", "models", "pagoda-small.gguf");
  if (!existsSync(bundled)) {
    console.log("bundled model missing: its chat check skipped");
    return;
  }
  const second = await startServer(pagoda, ["-m", bundled, "-t", "1"]);
  try {
    const page = await context.newPage();
    await page.goto(`http://127.0.0.1:${second.port}/`);
    await page.waitForFunction(() => document.getElementById("model").textContent.startsWith("model: "));
    for (const [i, question] of ["What does lamp mean?", "Tell me a joke."].entries()) {
      await page.fill("#input", question);
      await page.click("#send");
      await page.waitForFunction((n) => {
        const msgs = document.querySelectorAll("#log .assistant");
        return document.body.dataset.streaming === "false" && msgs.length === n;
      }, i + 1, { timeout: 60000 });
      const reply = (await page.locator("#log .assistant").nth(i).textContent()).trim();
      console.log(`bundled model: ${JSON.stringify(question)} -> ${JSON.stringify(reply.slice(0, 120))}`);
      assert.ok(reply.length > 0, `the bundled model gave an empty reply to ${JSON.stringify(question)}`);
    }
    await page.screenshot({ path: screenshot.replace(/\.png$/, "-bundled.png") });
  } finally {
    const code = await stopServer(second.server);
    assert.equal(code, 0, `pagoda serve (bundled model) exited with ${code}`);
  }
}

const exitCode = await stopServer(server);
rmSync(dir, { recursive: true, force: true });
if (exitCode !== 0) { console.error(`pagoda serve exited with ${exitCode} after SIGTERM`); failed = true; }
process.exit(failed ? 1 : 0);
