// The official `openai` npm client against `pagoda serve` on the bundled
// model: a two-round tool conversation, streamed and not, with tool_choice
// "required" and "auto", and a response_format json_schema answer that the
// client's JSON.parse accepts. Usage: node tools_test.mjs [path/to/pagoda].
// Exit 77 (ctest: skipped) when node_modules or the bundled model is missing.
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import assert from "node:assert/strict";
import { startServer, stopServer } from "./server.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const model = join(here, "..", "..", "..", "models", "pagoda-small.gguf");
if (!existsSync(join(here, "node_modules", "openai")) || !existsSync(model)) {
  console.log("SKIP: run `npm ci` in tests/server/node (and keep models/pagoda-small.gguf)");
  process.exit(77);
}
const { default: OpenAI } = await import("openai");
const pagoda = process.argv[2] ?? join(here, "..", "..", "..", "build", "pagoda");
const { server, port } = await startServer(pagoda, ["-m", model, "-t", "1", "--kv-cache-mem", "16",
                                                    "--served-model-name", "small"]);

// One small tool: the bundled model's context is 256 tokens.
const tools = [{ type: "function", function: { name: "weather", parameters: {
  type: "object", properties: { city: { type: "string", maxLength: 12 }, days: { type: "integer", minimum: 1, maximum: 7 } },
  required: ["city", "days"] } } }];

function checkCall(call) {
  assert.equal(call.type, "function");
  assert.equal(typeof call.id, "string");
  assert.equal(call.function.name, "weather");
  const args = JSON.parse(call.function.arguments);
  assert.equal(typeof args.city, "string");
  assert.ok(args.city.length <= 12);
  assert.ok(Number.isInteger(args.days) && args.days >= 1 && args.days <= 7, `days ${args.days}`);
}

// A streamed answer put back together: content, tool calls, finish reason.
async function collect(stream) {
  let content = "", finish = null;
  const calls = [];
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      content += c.delta?.content ?? "";
      for (const d of c.delta?.tool_calls ?? []) {
        calls[d.index] ??= { id: d.id, type: "function", function: { name: "", arguments: "" } };
        calls[d.index].function.name += d.function?.name ?? "";
        calls[d.index].function.arguments += d.function?.arguments ?? "";
      }
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { content, calls, finish };
}

let failed = false;
try {
  const client = new OpenAI({ apiKey: "none", baseURL: `http://127.0.0.1:${port}/v1`, maxRetries: 0 });
  const question = [{ role: "user", content: "Weather in Rome?" }];
  const base = { model: "small", tools, parallel_tool_calls: false, temperature: 1, seed: 4 };

  for (const stream of [false, true]) {
    // Round 1: the model must call the tool.
    let message, finish;
    if (stream) {
      const r = await collect(await client.chat.completions.create({ ...base, messages: question, tool_choice: "required", stream }));
      message = { role: "assistant", content: r.content || null, tool_calls: r.calls };
      finish = r.finish;
    } else {
      const r = await client.chat.completions.create({ ...base, messages: question, tool_choice: "required" });
      message = r.choices[0].message;
      finish = r.choices[0].finish_reason;
    }
    assert.equal(finish, "tool_calls");
    assert.equal(message.tool_calls.length, 1);
    checkCall(message.tool_calls[0]);

    // Round 2: the result goes back in; with auto the model answers or calls again.
    const messages = [...question, message,
                      { role: "tool", tool_call_id: message.tool_calls[0].id, content: "sunny, 24 C" }];
    if (stream) {
      const r = await collect(await client.chat.completions.create({ ...base, messages, tool_choice: "auto", stream }));
      if (r.calls.length) { assert.equal(r.finish, "tool_calls"); r.calls.forEach((c) => assert.equal(typeof c.function.arguments, "string")); }
      else { assert.ok(r.finish === "stop" || r.finish === "length"); assert.equal(typeof r.content, "string"); }
    } else {
      const r = await client.chat.completions.create({ ...base, messages, tool_choice: "auto" });
      const m = r.choices[0].message;
      if (m.tool_calls?.length) assert.equal(r.choices[0].finish_reason, "tool_calls");
      else assert.equal(typeof m.content, "string");
    }
  }

  // A named function, and a response_format json_schema answer.
  const named = await client.chat.completions.create({ ...base, messages: question,
                                                       tool_choice: { type: "function", function: { name: "weather" } } });
  checkCall(named.choices[0].message.tool_calls[0]);
  const structured = await client.chat.completions.create({
    model: "small", messages: question, temperature: 1, seed: 2,
    response_format: { type: "json_schema", json_schema: { name: "forecast", strict: true, schema: {
      type: "object", properties: { city: { type: "string", maxLength: 10 }, sunny: { type: "boolean" } },
      required: ["city", "sunny"], additionalProperties: false } } } });
  const value = JSON.parse(structured.choices[0].message.content);
  assert.equal(typeof value.sunny, "boolean");
  assert.ok(value.city.length <= 10);
  console.log("openai node client: tool calls (required, named, auto; streamed and not), json_schema OK");
} catch (e) {
  console.error(e);
  failed = true;
}
const exitCode = await stopServer(server);
if (exitCode !== 0) { console.error(`pagoda serve exited with ${exitCode} after SIGTERM`); failed = true; }
process.exit(failed ? 1 : 0);
