#include "server/chat_page.h"

namespace pagoda::server {
namespace {

// The page keeps the conversation in `convo`, sends it with stream: true,
// reads the SSE body with a ReadableStream reader and renders each delta as
// text (never as HTML). Stop aborts the fetch. body[data-streaming] tells
// tests (and CSS) whether an answer is streaming.
constexpr std::string_view kPage = R"PAGE(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Pagoda chat</title>
<style>
  * { box-sizing: border-box; }
  body { margin: 0; font: 15px/1.45 system-ui, sans-serif; background: #f4f4f6; color: #1c1c22;
         display: flex; flex-direction: column; height: 100vh; }
  header { display: flex; gap: 12px; align-items: center; padding: 8px 16px; background: #1f2a44; color: #fff;
           flex-wrap: wrap; }
  header h1 { font-size: 17px; margin: 0 8px 0 0; }
  header label { font-size: 13px; opacity: .9; }
  header input { width: 9em; padding: 3px 6px; border-radius: 4px; border: 1px solid #889; }
  #model { font-size: 13px; opacity: .8; margin-left: auto; }
  #log { flex: 1; overflow-y: auto; padding: 16px; display: flex; flex-direction: column; gap: 10px; }
  .msg { max-width: 80%; padding: 8px 12px; border-radius: 10px; white-space: pre-wrap; word-wrap: break-word; }
  .user { align-self: flex-end; background: #2f6fde; color: #fff; }
  .assistant { align-self: flex-start; background: #fff; border: 1px solid #dde; }
  .error { align-self: center; background: #fde8e8; color: #8a1111; border: 1px solid #f3b4b4; }
  body[data-streaming="true"] .assistant:last-child::after { content: "\25CF"; color: #2f6fde; margin-left: 4px; }
  form { display: flex; gap: 8px; padding: 10px 16px; background: #fff; border-top: 1px solid #dde; }
  textarea { flex: 1; resize: none; height: 3.2em; padding: 6px 8px; font: inherit; border-radius: 6px;
             border: 1px solid #bbc; }
  button { padding: 0 16px; border-radius: 6px; border: 0; background: #2f6fde; color: #fff; font: inherit;
           cursor: pointer; }
  button:disabled { background: #aab; cursor: default; }
  #stop:enabled { background: #c0392b; }
  #clear { background: #667; }
</style>
</head>
<body data-streaming="false">
<header>
  <h1>Pagoda</h1>
  <label>API key <input id="key" type="password" autocomplete="off" placeholder="(none)"></label>
  <label>Max tokens <input id="max" type="number" min="1" value="256" style="width:5em"></label>
  <label>Temperature <input id="temp" type="number" min="0" step="0.1" value="0.7" style="width:4.5em"></label>
  <span id="model"></span>
</header>
<main id="log" aria-live="polite"></main>
<form id="form">
  <textarea id="input" placeholder="Send a message (Enter to send, Shift+Enter for a new line)"></textarea>
  <button id="send" type="submit">Send</button>
  <button id="stop" type="button" disabled>Stop</button>
  <button id="clear" type="button">Clear</button>
</form>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const convo = [];
let controller = null, modelId = "";
$("key").value = localStorage.getItem("pagoda-api-key") || "";

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = $("key").value.trim();
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}
function add(cls, text) {
  const div = document.createElement("div");
  div.className = "msg " + cls;
  div.textContent = text;
  $("log").appendChild(div);
  $("log").scrollTop = $("log").scrollHeight;
  return div;
}
async function errorText(res) {
  try { const j = await res.json(); return (j.error && j.error.message) || res.statusText; }
  catch (e) { return res.statusText; }
}
async function loadModel() {
  try {
    const res = await fetch("/v1/models", { headers: headers() });
    if (!res.ok) { $("model").textContent = "models: " + await errorText(res); return; }
    const j = await res.json();
    modelId = (j.data && j.data[0] && j.data[0].id) || "";
    $("model").textContent = modelId ? "model: " + modelId : "";
  } catch (e) { $("model").textContent = "server unreachable"; }
}
function setStreaming(on) {
  document.body.dataset.streaming = on ? "true" : "false";
  $("send").disabled = on;
  $("stop").disabled = !on;
}
async function send(text) {
  convo.push({ role: "user", content: text });
  add("user", text);
  const out = add("assistant", "");
  let answer = "";
  controller = new AbortController();
  setStreaming(true);
  try {
    const body = { messages: convo, stream: true, max_tokens: Number($("max").value) || 256,
                   temperature: Number($("temp").value) };
    if (modelId) body.model = modelId;
    const res = await fetch("/v1/chat/completions", { method: "POST", headers: headers(),
                                                      body: JSON.stringify(body), signal: controller.signal });
    if (!res.ok) throw new Error(res.status + ": " + await errorText(res));
    const reader = res.body.getReader(), decoder = new TextDecoder();
    let buf = "", done = false;
    while (!done) {
      const chunk = await reader.read();
      if (chunk.done) break;
      buf += decoder.decode(chunk.value, { stream: true });
      const lines = buf.split("\n");
      buf = lines.pop();
      for (const raw of lines) {
        const line = raw.replace(/\r$/, "");
        if (!line.startsWith("data:")) continue;
        const data = line.slice(5).trim();
        if (data === "[DONE]") { done = true; break; }
        const j = JSON.parse(data);
        if (j.error) throw new Error(j.error.message || "stream error");
        for (const c of j.choices || []) answer += (c.delta && c.delta.content) || "";
        out.textContent = answer;
        $("log").scrollTop = $("log").scrollHeight;
      }
    }
  } catch (e) {
    if (e.name === "AbortError") out.textContent = answer + " [stopped]";
    else add("error", String(e.message || e));
  } finally {
    if (answer) convo.push({ role: "assistant", content: answer });
    else if (!out.textContent) out.remove();
    if (!answer) convo.pop();
    controller = null;
    setStreaming(false);
  }
}
$("form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const text = $("input").value.trim();
  if (!text || controller) return;
  $("input").value = "";
  send(text);
});
$("input").addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && !ev.shiftKey) { ev.preventDefault(); $("form").requestSubmit(); }
});
$("stop").addEventListener("click", () => { if (controller) controller.abort(); });
$("clear").addEventListener("click", () => { if (!controller) { convo.length = 0; $("log").textContent = ""; } });
$("key").addEventListener("change", () => {
  localStorage.setItem("pagoda-api-key", $("key").value.trim());
  loadModel();
});
loadModel();
</script>
</body>
</html>
)PAGE";

}  // namespace

std::string_view chat_page_html() { return kPage; }

}  // namespace pagoda::server
