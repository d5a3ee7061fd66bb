// The official `openai` npm client against `pagoda serve`: a completion, a
// chat completion and a streamed chat completion on a tiny random model.
// Usage: node run_test.mjs [path/to/pagoda]. Exit 77 (ctest: skipped) when
// node_modules is missing: run `npm ci` (or `npm install`) here first.
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import assert from "node:assert/strict";
import { startServer, stopServer } from "./server.mjs";

const here = dirname(fileURLToPath(import.meta.url));
if (!existsSync(join(here, "node_modules", "openai"))) {
  console.log("SKIP: tests/server/node/node_modules is missing; run `npm ci` in tests/server/node");
  process.exit(77);
}
const { default: OpenAI } = await import("openai");

const pagoda = process.argv[2] ?? join(here, "..", "..", "..", "build", "pagoda");
const dir = mkdtempSync(join(tmpdir(), "pagoda-node-"));
const model = join(dir, "tiny.gguf");
const made = spawnSync(pagoda, ["make-model", "--preset", "tiny", "--ctx", "512", "-o", model, "--threads", "1"],
                       { stdio: "inherit" });
assert.equal(made.status, 0, "make-model failed");

const { server, port } = await startServer(pagoda, ["-m", model, "-t", "1", "--kv-cache-mem", "4",
                                                  "--api-key", "sk-node", "--served-model-name", "tiny"]);

let failed = false;
try {
  const client = new OpenAI({ apiKey: "sk-node", baseURL: `http://127.0.0.1:${port}/v1`, maxRetries: 0 });

  const models = await client.models.list();
  assert.equal(models.data[0].id, "tiny");

  const completion = await client.completions.create({ model: "tiny", prompt: "Hello", max_tokens: 8, temperature: 0 });
  assert.equal(completion.object, "text_completion");
  assert.equal(typeof completion.choices[0].text, "string");
  assert.ok(completion.usage.completion_tokens >= 1 && completion.usage.completion_tokens <= 8);

  const chat = await client.chat.completions.create({
    model: "tiny", messages: [{ role: "user", content: "Say hi" }], max_tokens: 8, temperature: 0 });
  assert.equal(chat.choices[0].message.role, "assistant");
  assert.equal(typeof chat.choices[0].message.content, "string");

  const stream = await client.chat.completions.create({
    model: "tiny", messages: [{ role: "user", content: "Say hi" }], max_tokens: 8, temperature: 0, stream: true,
    stream_options: { include_usage: true } });
  let text = "", finish = null, usage = null, chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.delta?.content ?? "";
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.ok(chunks >= 2, "expected several chunks");
  assert.ok(finish === "stop" || finish === "length", `finish_reason ${finish}`);
  assert.equal(text, chat.choices[0].message.content, "streamed text differs from the non-streamed one");
  assert.ok(usage && usage.completion_tokens >= 1);

  await assert.rejects(client.chat.completions.create({ model: "nope", messages: [{ role: "user", content: "x" }] }),
                       (e) => e.status === 404);
  const bad = new OpenAI({ apiKey: "wrong", baseURL: `http://127.0.0.1:${port}/v1`, maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e.status === 401);
  console.log("openai node client: completion, chat, streamed chat OK");
} catch (e) {
  console.error(e);
  failed = true;
}

const exitCode = await stopServer(server);
rmSync(dir, { recursive: true, force: true });
if (exitCode !== 0) { console.error(`pagoda serve exited with ${exitCode} after SIGTERM`); failed = true; }
process.exit(failed ? 1 : 0);
