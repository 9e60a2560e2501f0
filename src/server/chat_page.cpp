// The chat page served at "/" by `ember serve`: one self-contained HTML
// document (inline CSS and JS, no external assets) that talks to the server's
// OpenAI-compatible API. It lists the model via GET /v1/models, streams
// replies from POST /v1/chat/completions (SSE read with fetch +
// ReadableStream), shows time to first token and tokens/s, and renders all
// model output as text only (never as HTML). A reasoning model's thinking
// (delta.reasoning_content) is shown in a collapsible block above the answer,
// open while it streams and folded once the answer starts; tool calls
// (tools and tool_choice from the settings) are shown as calls, name and
// arguments, each with a field for its result that sends the next turn.
// tests/server/chat_page_test.py drives it in headless Chromium; it relies
// on the element ids and classes used here.
#include "server/chat_page.h"

namespace ember {
namespace {

// The delimiter EMBERHTML must never appear inside the document.
constexpr const char kChatPageHtml[] = R"EMBERHTML(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:">
<title>ember chat</title>
<style>
*{box-sizing:border-box}
html,body{height:100%;margin:0}
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;background:#f4f4f6;color:#1d1d22;display:flex;flex-direction:column}
header{display:flex;align-items:center;gap:10px;padding:8px 14px;background:#1f2330;color:#eee}
header h1{font-size:17px;margin:0}
#model{font:13px ui-monospace,monospace;color:#ffb36b;overflow:hidden;text-overflow:ellipsis;white-space:nowrap;flex:1}
button{font:inherit;border:1px solid #888;border-radius:6px;padding:5px 12px;background:#fff;cursor:pointer}
button:disabled{opacity:.45;cursor:default}
header button{background:#323849;color:#eee;border-color:#555}
#settings{display:none;flex-wrap:wrap;gap:10px 18px;padding:10px 14px;background:#e6e7ec;border-bottom:1px solid #ccc;font-size:13px}
#settings.open{display:flex}
#settings label{display:flex;flex-direction:column;gap:3px}
#settings input,#settings textarea,#settings select{font:inherit;padding:4px 6px;border:1px solid #aaa;border-radius:4px}
#settings input[type=number]{width:7em}
#settings textarea{width:min(480px,90vw);height:48px;resize:vertical}
#messages{flex:1;overflow-y:auto;padding:14px;display:flex;flex-direction:column;gap:10px}
.msg{max-width:min(760px,88%);padding:8px 12px;border-radius:12px;white-space:pre-wrap;overflow-wrap:anywhere}
.msg.user{align-self:flex-end;background:#2f6fed;color:#fff;border-bottom-right-radius:3px}
.msg.assistant{align-self:flex-start;background:#fff;border:1px solid #ddd;border-bottom-left-radius:3px}
.msg.assistant:empty::before{content:"\2026";color:#999}
.msg.assistant[data-stopped="1"]::after{content:" [stopped]";color:#999;font-size:12px}
.msg.assistant[data-noanswer="1"]::after{content:"[no answer: max tokens ran out while thinking]";color:#999;font-size:12px}
.msg.error{align-self:stretch;max-width:none;background:#fde8e8;color:#9b1c1c;border:1px solid #f5b5b5;font-size:13px}
.msg.tool{align-self:flex-end;background:#eef6ee;border:1px solid #b9d9b9;font:12px ui-monospace,monospace}
details.thinking{margin:0 0 6px;padding:4px 8px;border-left:3px solid #c9c9d6;background:#f6f6fa;color:#555;font-size:13px;border-radius:4px}
details.thinking summary{cursor:pointer;color:#777;font-style:italic}
.tool-call{margin-top:6px;padding:6px 8px;border:1px solid #d5c7a4;background:#fdf8ea;border-radius:6px;white-space:normal}
.tool-call .tool-name{font:600 13px ui-monospace,monospace;color:#7a5200}
.tool-call .tool-name::before{content:"\2192  call ";font-weight:400;color:#a08040}
.tool-call pre{margin:4px 0;font:12px ui-monospace,monospace;white-space:pre-wrap;overflow-wrap:anywhere}
.tool-call textarea{width:100%;font:12px ui-monospace,monospace;height:36px;margin-top:4px}
.tool-call button{margin-top:4px;font-size:12px;padding:3px 9px}
.hint{color:#888;text-align:center;margin:auto;font-size:14px}
footer{padding:8px 14px 10px;background:#fff;border-top:1px solid #ddd}
#row{display:flex;gap:8px;align-items:flex-end}
#input{flex:1;font:inherit;padding:7px 9px;border:1px solid #aaa;border-radius:8px;resize:none;height:62px}
#send{background:#2f6fed;color:#fff;border-color:#2f6fed}
#stats{font:12px ui-monospace,monospace;color:#666;min-height:16px;margin-top:4px}
</style>
</head>
<body>
<header>
<h1>ember</h1>
<span id="model" title="model">loading&hellip;</span>
<button id="new-chat" type="button">New chat</button>
<button id="toggle-settings" type="button" aria-expanded="false">Settings</button>
</header>
<form id="settings" autocomplete="off">
<label>Temperature <input id="temperature" type="number" min="0" max="2" step="0.05" value="0.7"></label>
<label>Max tokens <input id="max-tokens" type="number" min="1" step="1" value="256"></label>
<label>Seed (empty: random) <input id="seed" type="number" min="0" step="1"></label>
<label>API key (optional) <input id="api-key" type="password" autocomplete="off" placeholder="sent as Bearer token"></label>
<label>System prompt (optional) <textarea id="system"></textarea></label>
<label>Thinking budget (tokens; empty: the server's) <input id="thinking-budget" type="number" min="-1" step="1"></label>
<label>Tools (JSON list of function definitions, optional) <textarea id="tools" placeholder='[{"type": "function", "function": {"name": "get_weather", "parameters": {...}}}]'></textarea></label>
<label>Tool choice <select id="tool-choice"><option value="auto">auto</option><option value="required">required</option><option value="none">none</option></select></label>
</form>
<main id="messages" aria-live="polite"><div class="hint" id="hint">Type a message below. Enter sends, Shift+Enter adds a new line.</div></main>
<footer>
<div id="row">
<textarea id="input" placeholder="Message" autofocus></textarea>
<button id="send" type="button">Send</button>
<button id="stop" type="button" disabled>Stop</button>
</div>
<div id="stats"></div>
</footer>
<script>
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const KEY_STORE = "ember.apiKey";
  let modelId = null;
  let conversation = [];  // {role, content} of user and assistant turns
  let controller = null;  // AbortController of the stream in flight
  let chatEpoch = 0;      // bumped by "New chat": a stream of an older chat must not touch the new one

  function store(get, value) {
    try {
      if (get) return localStorage.getItem(KEY_STORE) || "";
      if (value) localStorage.setItem(KEY_STORE, value); else localStorage.removeItem(KEY_STORE);
    } catch (e) { /* storage unavailable: key lives in the field only */ }
    return "";
  }

  function authHeaders() {
    const key = $("api-key").value.trim();
    return key ? { "Authorization": "Bearer " + key } : {};
  }

  function addMsg(kind, text) {
    const hint = $("hint");
    if (hint) hint.remove();
    const el = document.createElement("div");
    el.className = "msg " + kind;
    el.textContent = text;  // text only: model output is never parsed as HTML
    $("messages").appendChild(el);
    scrollDown();
    return el;
  }

  function scrollDown() {
    const box = $("messages");
    box.scrollTop = box.scrollHeight;
  }

  // Message of a non-200 reply: OpenAI-style {"error":{"message":...}} or the raw body.
  function errorText(status, body) {
    let msg = "";
    try {
      const j = JSON.parse(body);
      if (j && j.error) msg = typeof j.error === "string" ? j.error : String(j.error.message || "");
    } catch (e) { /* not JSON */ }
    if (!msg) msg = body.trim().slice(0, 300) || "(empty response)";
    return "HTTP " + status + ": " + msg;
  }

  async function loadModel() {
    $("model").textContent = "loading\u2026";
    try {
      const r = await fetch("/v1/models", { headers: authHeaders() });
      const body = await r.text();
      if (!r.ok) throw new Error(errorText(r.status, body));
      const j = JSON.parse(body);
      const m = j && Array.isArray(j.data) ? j.data[0] : null;
      if (!m || typeof m.id !== "string" || !m.id) throw new Error("the server lists no model");
      modelId = m.id;
      $("model").textContent = modelId;
      for (const el of document.querySelectorAll(".msg.error.models")) el.remove();
      return true;
    } catch (e) {
      modelId = null;
      $("model").textContent = "no model";
      addMsg("error models", "Could not read /v1/models: " + e.message);
      return false;
    }
  }

  function numberSetting(id, fallback, lo, hi, integer) {
    let v = Number($(id).value);
    if ($(id).value.trim() === "" || !Number.isFinite(v)) v = fallback;
    if (integer) v = Math.round(v);
    return Math.min(hi, Math.max(lo, v));
  }

  // exact: tokens from the server's usage; otherwise counted stream chunks.
  function showStats(t0, tFirst, tNow, tokens, exact, note) {
    if (tFirst === null) { $("stats").textContent = "waiting for first token\u2026"; return; }
    const ttft = tFirst - t0;
    // Decode speed: tokens after the first over the time since the first.
    const rate = tokens > 1 ? (tokens - 1) / (Math.max(tNow - tFirst, 1) / 1000)
                            : tokens / (Math.max(tNow - t0, 1) / 1000);
    $("stats").textContent = "TTFT " + ttft.toFixed(0) + " ms \u00b7 " + rate.toFixed(1) + " tok/s \u00b7 " +
        tokens + (exact ? " token" : " chunk") + (tokens === 1 ? "" : "s") + (note ? " (" + note + ")" : "");
  }

  function setBusy(busy) {
    $("send").disabled = busy;
    $("stop").disabled = !busy;
  }

  // An assistant bubble: a collapsible thinking block, the answer's text and
  // its tool calls, each shown only once something of it arrived.
  function makeReply() {
    return { el: addMsg("assistant", ""), think: null, thinkText: null, thinkDone: false, text: null, box: null,
             calls: [] };
  }

  function addThinking(r, piece, seconds) {
    if (!r.think) {
      r.think = document.createElement("details");
      r.think.className = "thinking";
      r.think.open = true;
      const sum = document.createElement("summary");
      sum.textContent = "Thinking\u2026";
      r.thinkText = document.createElement("div");
      r.thinkText.className = "thinking-text";
      r.think.append(sum, r.thinkText);
      r.el.insertBefore(r.think, r.el.firstChild);
    }
    r.thinkText.textContent += piece;
    r.think.firstChild.textContent = "Thinking\u2026 (" + seconds + " s)";
  }

  // The answer began (or the reply ended): the thinking folds away.
  function endThinking(r, seconds) {
    if (!r.think || r.thinkDone) return;
    r.thinkDone = true;
    r.think.open = false;
    r.think.firstChild.textContent = "Thought for " + seconds + " s";
  }

  function setText(r, text) {
    if (!r.text) {
      r.text = document.createElement("div");
      r.text.className = "content";
      r.el.insertBefore(r.text, r.box);
    }
    r.text.textContent = text;
  }

  // One tool_calls delta: a call's start (id, name) or a piece of its arguments.
  function addCall(r, d) {
    if (!d || typeof d.index !== "number") return;
    if (!r.box) {
      r.box = document.createElement("div");
      r.box.className = "tool-calls";
      r.el.appendChild(r.box);
    }
    let c = r.calls[d.index];
    if (!c) {
      c = { id: "", name: "", args: "", el: document.createElement("div") };
      c.el.className = "tool-call";
      c.nameEl = document.createElement("div");
      c.nameEl.className = "tool-name";
      c.argsEl = document.createElement("pre");
      c.argsEl.className = "tool-args";
      c.el.append(c.nameEl, c.argsEl);
      r.box.appendChild(c.el);
      r.calls[d.index] = c;
    }
    if (typeof d.id === "string") c.id = d.id;
    const f = d.function || {};
    if (typeof f.name === "string") c.name += f.name;
    if (typeof f.arguments === "string") c.args += f.arguments;
    c.nameEl.textContent = c.name;
    c.argsEl.textContent = c.args;
  }

  // The reply's calls are complete: arguments pretty-printed, and a field
  // per call for its result; "Send results" continues the conversation.
  function finishCalls(r) {
    const calls = r.calls.filter(Boolean);
    if (!calls.length) return;
    for (const c of calls) {
      try { c.argsEl.textContent = JSON.stringify(JSON.parse(c.args), null, 2); } catch (e) { /* as written */ }
      c.result = document.createElement("textarea");
      c.result.className = "tool-result";
      c.result.placeholder = "result of " + c.name;
      c.el.appendChild(c.result);
    }
    const btn = document.createElement("button");
    btn.type = "button";
    btn.className = "send-results";
    btn.textContent = "Send result" + (calls.length > 1 ? "s" : "");
    btn.addEventListener("click", () => {
      if (controller) return;
      btn.disabled = true;
      for (const c of calls) {
        c.result.readOnly = true;
        conversation.push({ role: "tool", tool_call_id: c.id, content: c.result.value });
        addMsg("tool", c.name + " \u2192 " + c.result.value);
      }
      generate(null, "");
    });
    r.box.appendChild(btn);
  }

  async function send() {
    const text = $("input").value;
    if (controller || !text.trim()) return;
    if (!modelId && !(await loadModel())) return;
    $("input").value = "";
    const userEl = addMsg("user", text);
    conversation.push({ role: "user", content: text });
    await generate(userEl, text);
  }

  // Streams the next assistant turn for the conversation so far. userEl /
  // text: the user turn that asked for it (taken back when nothing comes).
  async function generate(userEl, text) {
    const reply = makeReply();
    const bubble = reply.el;
    const messages = [];
    const sys = $("system").value.trim();
    if (sys) messages.push({ role: "system", content: sys });
    for (const m of conversation) messages.push(m);
    const request = {
      model: modelId,
      messages: messages,
      stream: true,
      stream_options: { include_usage: true },
      temperature: numberSetting("temperature", 0.7, 0, 2, false),
      max_tokens: numberSetting("max-tokens", 256, 1, 1 << 20, true),
    };
    if ($("seed").value.trim() !== "") request.seed = numberSetting("seed", 0, 0, 2 ** 53, true);
    if ($("thinking-budget").value.trim() !== "")
      request.thinking_budget = numberSetting("thinking-budget", -1, -1, 1 << 30, true);
    const toolsText = $("tools").value.trim();
    if (toolsText) {
      try {
        request.tools = JSON.parse(toolsText);
      } catch (e) {
        addMsg("error", "Tools are not valid JSON: " + e.message);
        bubble.remove();
        if (userEl) { conversation.pop(); $("input").value = text; }
        return;
      }
      request.tool_choice = $("tool-choice").value;
    }
    const epoch = chatEpoch;
    const ctl = new AbortController();
    controller = ctl;
    setBusy(true);
    const t0 = performance.now();
    const secs = () => ((performance.now() - t0) / 1000).toFixed(1);
    let tFirst = null, chunks = 0, usage = null, content = "", thinking = "", failure = null, stopped = false;
    $("stats").textContent = "waiting for first token\u2026";
    try {
      const r = await fetch("/v1/chat/completions", {
        method: "POST",
        headers: Object.assign({ "Content-Type": "application/json" }, authHeaders()),
        body: JSON.stringify(request),
        signal: ctl.signal,
      });
      if (!r.ok) throw new Error(errorText(r.status, await r.text()));
      if (!r.body) throw new Error("the response has no body");
      const reader = r.body.getReader();
      const decoder = new TextDecoder();
      // One SSE event's data: an OpenAI chunk, an error object or [DONE].
      const handle = (data) => {
        if (data === "[DONE]") return true;
        let ev;
        try { ev = JSON.parse(data); } catch (e) { return false; }
        if (!ev || typeof ev !== "object") return false;
        if (ev.error) throw new Error(typeof ev.error === "string" ? ev.error : String(ev.error.message || "stream error"));
        if (ev.usage && typeof ev.usage === "object") usage = ev.usage;
        const c = Array.isArray(ev.choices) ? ev.choices[0] : null;
        const d = c && c.delta ? c.delta : null;
        if (!d) return false;
        const think = typeof d.reasoning_content === "string" ? d.reasoning_content
                    : typeof d.reasoning === "string" ? d.reasoning : "";
        const piece = typeof d.content === "string" ? d.content : "";
        const calls = Array.isArray(d.tool_calls) ? d.tool_calls : [];
        if (!think && !piece && !calls.length) return false;
        const now = performance.now();
        if (tFirst === null) tFirst = now;
        chunks++;
        const box = $("messages");
        const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
        if (think) {
          thinking += think;
          addThinking(reply, think, secs());
        }
        if (piece || calls.length) endThinking(reply, secs());
        if (piece) {
          content += piece;
          setText(reply, content);
        }
        for (const t of calls) addCall(reply, t);
        if (atBottom) scrollDown();
        showStats(t0, tFirst, now, chunks, false, "streaming");
        return false;
      };
      // Event-stream framing: lines end in LF, CRLF or CR; "data:" lines
      // gather until a blank line; ":" comments and other fields are skipped.
      let buf = "", dataLines = [], done = false;
      while (!done) {
        const part = await reader.read();
        if (part.done) break;
        buf += decoder.decode(part.value, { stream: true });
        let m;
        while (!done && (m = /\r\n|\r|\n/.exec(buf)) !== null) {
          if (m[0] === "\r" && m.index === buf.length - 1) break;  // maybe CRLF split across reads
          const line = buf.slice(0, m.index);
          buf = buf.slice(m.index + m[0].length);
          if (line === "") {
            if (dataLines.length) done = handle(dataLines.join("\n"));
            dataLines = [];
          } else if (line.startsWith("data:")) {
            dataLines.push(line.slice(line.startsWith("data: ") ? 6 : 5));
          }
        }
      }
      if (!done) {  // lenient end: final line or blank line missing
        const last = (buf + decoder.decode()).replace(/\r$/, "");
        if (last.startsWith("data:")) dataLines.push(last.slice(last.startsWith("data: ") ? 6 : 5));
        if (dataLines.length) done = handle(dataLines.join("\n"));
      }
      if (done) reader.cancel().catch(() => {});
      else throw new Error("the stream ended before [DONE]" + (content ? "; the reply may be cut short" : ""));
    } catch (e) {
      if (e && e.name === "AbortError") stopped = true;
      else failure = e && e.message ? e.message : String(e);
    }
    const tEnd = performance.now();
    controller = null;
    setBusy(false);
    endThinking(reply, secs());
    bubble.dataset.done = "1";
    if (epoch !== chatEpoch) return;  // the chat was cleared meanwhile
    const exact = !!usage && Number.isFinite(usage.completion_tokens);
    const note = stopped ? "stopped" : failure !== null ? "failed" : "";
    if (tFirst !== null) showStats(t0, tFirst, tEnd, exact ? usage.completion_tokens : chunks, exact, note);
    else $("stats").textContent = stopped ? "stopped before the first token" : "";
    const calls = reply.calls.filter(Boolean);
    if (content || calls.length) {
      const turn = { role: "assistant", content: content || null };
      if (calls.length)
        turn.tool_calls = calls.map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: c.args } }));
      conversation.push(turn);
      if (!stopped && failure === null) finishCalls(reply);
    } else {
      // No answer (thinking alone is not one): take the turn back so roles
      // keep alternating; a user turn's text is offered again.
      if (userEl) {
        conversation.pop();
        userEl.title = "not answered";
        if (!$("input").value) $("input").value = text;
      }
      if (thinking) bubble.dataset.noanswer = "1";
      else bubble.remove();
    }
    if (stopped) bubble.dataset.stopped = "1";
    if (failure !== null) addMsg("error", failure);
    $("input").focus();
  }

  function newChat() {
    if (controller) controller.abort();
    chatEpoch++;
    conversation = [];
    $("messages").textContent = "";
    $("stats").textContent = "";
    $("input").focus();
  }

  $("send").addEventListener("click", send);
  $("stop").addEventListener("click", () => { if (controller) controller.abort(); });
  $("new-chat").addEventListener("click", newChat);
  $("input").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); send(); }
  });
  $("settings").addEventListener("submit", (e) => e.preventDefault());
  $("toggle-settings").addEventListener("click", () => {
    const open = $("settings").classList.toggle("open");
    $("toggle-settings").setAttribute("aria-expanded", String(open));
  });
  $("api-key").value = store(true);
  $("api-key").addEventListener("change", () => {
    store(false, $("api-key").value.trim());
    loadModel();
  });
  loadModel();
})();
</script>
</body>
</html>
)EMBERHTML";

}  // namespace

const std::string& chat_page_html() {
  static const std::string html(kChatPageHtml, sizeof(kChatPageHtml) - 1);
  return html;
}

}  // namespace ember
