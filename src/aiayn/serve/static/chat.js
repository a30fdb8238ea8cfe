// The chat page of a language model with a chat template: conversations kept in this browser (localStorage),
// each reply streamed by POST /v1/chat/completions (the server renders the template: one road with the API),
// with its tokens' log-probabilities and ids, so that any token can be opened (inspect.js), and from a server with
// --draft which of them its draft guessed and the model accepted (marked in the tokens view). The key of a server
// behind --api-key is asked once and kept in sessionStorage.
"use strict";

const $ = (id) => document.getElementById(id);
const CHATS = "aiayn-chats", CURRENT = "aiayn-chat-current", SETTINGS = "aiayn-chat-settings", KEY = "aiayn-key";
const server = {model: "", adapters: [], maxLen: 0, cap: 128, decoding: {}};
let chats = loadChats();
let current = localStorage.getItem(CURRENT);
let controller = null;  // the reply in flight: Stop aborts it

function loadChats() {
  try {
    const found = JSON.parse(localStorage.getItem(CHATS));
    return Array.isArray(found) ? found : [];
  } catch { return []; }
}

function saveChats() {
  localStorage.setItem(CHATS, JSON.stringify(chats));
  localStorage.setItem(CURRENT, current || "");
}

function chat() {
  let found = chats.find((c) => c.id === current);
  if (!found) {
    found = {id: crypto.randomUUID ? crypto.randomUUID() : String(Date.now() + Math.random()), title: "",
             system: "", messages: []};
    chats.unshift(found);
    current = found.id;
  }
  return found;
}

function setStatus(text, error = false) {
  $("status").textContent = text;
  $("status").classList.toggle("error", error);
}

// Any route of the server, with the key if one was given; a 401 asks for it.
async function api(path, body, signal) {
  const headers = {"Content-Type": "application/json"};
  const key = sessionStorage.getItem(KEY);
  if (key) headers.Authorization = `Bearer ${key}`;
  const res = await fetch(path, body === undefined ? {headers} : {method: "POST", headers, body: JSON.stringify(body),
                                                                  signal});
  if (res.status === 401) {
    $("key-form").hidden = false;
    $("key-input").focus();
    throw new Error(t("key_needed"));
  }
  if (!res.ok) {
    const data = await res.json().catch(() => ({}));
    const detail = data.error?.message ?? (typeof data.detail === "string" ? data.detail : JSON.stringify(data.detail));
    throw new Error(`${res.status}: ${detail || res.statusText}`);
  }
  return res;
}

// ---- the conversation list ----
function renderList() {
  const list = $("chat-list");
  list.replaceChildren(...chats.map((c) => {
    const item = document.createElement("li");
    item.classList.toggle("current", c.id === current);
    const open = Object.assign(document.createElement("button"), {type: "button", className: "chat-open",
                                                                  textContent: c.title || t("untitled")});
    open.addEventListener("click", () => { current = c.id; saveChats(); showChat(); });
    const rename = iconButton("✎", t("rename"), () => startRename(item, c));
    const remove = iconButton("×", t("delete"), () => {
      if (!confirm(t("delete_confirm", {title: c.title || t("untitled")}))) return;
      chats = chats.filter((x) => x.id !== c.id);
      if (current === c.id) current = chats[0]?.id || null;
      saveChats();
      showChat();
    });
    item.append(open, rename, remove);
    return item;
  }));
}

function iconButton(symbol, label, action) {
  const button = Object.assign(document.createElement("button"), {type: "button", className: "icon",
                                                                   textContent: symbol, title: label});
  button.setAttribute("aria-label", label);
  button.addEventListener("click", action);
  return button;
}

function startRename(item, c) {
  const input = Object.assign(document.createElement("input"), {value: c.title, className: "rename"});
  input.setAttribute("aria-label", t("rename"));
  const done = (keep) => { if (keep) { c.title = input.value.trim(); saveChats(); } renderList(); };
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter") done(true);
    if (e.key === "Escape") done(false);
  });
  input.addEventListener("blur", () => done(true));
  item.replaceChildren(input);
  input.focus();
}

// ---- the messages ----
function showChat() {
  const c = chat();
  $("system").value = c.system;
  if (c.system) $("system-box").open = true;
  renderList();
  renderMessages();
  closeInspector();
}

function renderMessages() {
  const c = chat();
  $("messages").replaceChildren(...c.messages.map((m, i) => messageItem(m, i, i === c.messages.length - 1)));
  showContext();
}

function messageItem(m, index, last) {
  const item = document.createElement("li");
  item.className = `msg ${m.role}`;
  item.dataset.index = String(index);
  const head = document.createElement("div");
  head.className = "msg-head";
  head.append(Object.assign(document.createElement("strong"), {textContent: t(m.role)}));
  const busy = controller !== null;
  if (m.role === "user" && !busy) head.append(iconButton("✎", t("edit"), () => editTurn(item, index)));
  if (m.role === "assistant" && m.info?.tokens?.length) {
    head.append(iconButton(t("tokens_short"), t("show_tokens"), () => toggleTokens(item, m, index)));
  }
  if (m.role === "assistant" && last && !busy) head.append(iconButton("↻", t("regenerate"), regenerate));
  const body = document.createElement("div");
  body.className = "msg-body";
  fillBody(body, m);
  item.append(head, body);
  if (m.role === "assistant" && m.info) item.append(statsLine(m.info));
  return item;
}

function fillBody(body, m) {
  if (m.role === "assistant") body.replaceChildren(...(m.calls || []).map(toolCall), renderMarkdown(m.content));
  else body.textContent = m.content;
}

function toolCall(call) {  // a call the server ran (--mcp): its tool and arguments, its result folded
  const item = document.createElement("details");
  item.className = "tool-call";
  const head = document.createElement("summary");
  head.textContent = t("tool_call", {name: call.name, args: call.arguments});
  const result = document.createElement("pre");
  result.textContent = call.result;
  item.append(head, result);
  return item;
}

function statsLine(info) {
  const line = document.createElement("p");
  line.className = "stats hint";
  const usage = info.usage || {};
  const parts = [t("stat_prompt", {n: usage.prompt_tokens ?? info.promptCount ?? "?"}),
                 t("stat_cached", {n: usage.prompt_tokens_details?.cached_tokens ?? 0}),
                 t("stat_completion", {n: usage.completion_tokens ?? info.ids?.length ?? 0})];
  const drafted = (info.drafted || []).filter(Boolean).length;
  if (drafted) parts.push(t("stat_drafted", {n: drafted}));
  if (info.rate) parts.push(t("stat_rate", {n: info.rate.toFixed(1)}));
  if (info.ttft !== undefined) parts.push(t("stat_ttft", {n: Math.round(info.ttft)}));
  if (info.stopped) parts.push(t("stopped"));
  line.textContent = parts.join(" · ");
  return line;
}

function showContext() {
  const last = [...chat().messages].reverse().find((m) => m.info);
  const used = last ? (last.info.promptCount || 0) + (last.info.ids?.length || 0) : 0;
  $("context").textContent = server.maxLen ? t("context_used", {n: used, max: server.maxLen}) : "";
}

function apiMessages(c, upTo = c.messages.length) {
  const turns = c.messages.slice(0, upTo).map((m) => ({role: m.role, content: m.content}));
  return c.system.trim() ? [{role: "system", content: c.system}, ...turns] : turns;
}

// ---- sending, streaming, stopping ----
function requestBody(c) {
  const s = currentSettings();
  const body = {model: $("adapter").value || server.model, messages: apiMessages(c), stream: true,
                stream_options: {include_usage: true}, logprobs: true, top_logprobs: 5, return_token_ids: true};
  for (const [field, value] of Object.entries({temperature: s.temperature, top_p: s.top_p, top_k: s.top_k,
                                               max_tokens: s.max_tokens, seed: s.seed})) {
    if (value !== "" && value !== null && value !== undefined) body[field] = Number(value);
  }
  const tools = $("tools").value;  // the server runs the calls (--mcp); a forced one for this reply
  if (!$("tools").hidden && tools !== "auto") {
    body.tool_choice = ["required", "none"].includes(tools) ? tools : {type: "function", function: {name: tools}};
  }
  if (s.schema.trim()) {
    body.response_format = {type: "json_schema", json_schema: {name: "answer", schema: JSON.parse(s.schema)}};
  }
  return body;
}

async function reply() {
  const c = chat();
  let body;
  try { body = requestBody(c); } catch (err) { setStatus(t("bad_schema", {msg: err.message}), true); return; }
  if (!c.title) c.title = (c.messages.find((m) => m.role === "user")?.content || "").slice(0, 40);
  const m = {role: "assistant", content: "", info: {tokens: [], ids: [], drafted: [], promptTail: [], promptCount: 0}};
  c.messages.push(m);
  controller = new AbortController();
  busy(true);
  renderList();
  renderMessages();
  const item = $("messages").lastElementChild;
  const started = performance.now();
  let first = null;
  try {
    const res = await api("/v1/chat/completions", body, controller.signal);
    setStatus(t("answering"));
    for await (const chunk of sseEvents(res)) {
      if (chunk.usage) m.info.usage = chunk.usage;
      for (const choice of chunk.choices || []) {
        take(m, choice);
        if (first === null && choice.delta?.content) first = performance.now();
      }
      fillBody(item.querySelector(".msg-body"), m);
    }
    setStatus("");
  } catch (err) {
    if (err.name === "AbortError") m.info.stopped = true;
    else setStatus(String(err.message || err), true);
  } finally {
    const end = performance.now();
    if (first !== null) {
      m.info.ttft = first - started;
      m.info.rate = m.info.ids.length > 1 ? (m.info.ids.length - 1) / ((end - first) / 1000) : undefined;
    }
    if (!m.content && !m.calls && !m.info.stopped) c.messages.pop();  // nothing came: an error, shown in the status line
    controller = null;
    busy(false);
    saveChats();
    renderMessages();
  }
}

function take(m, choice) {
  if (choice.prompt_token_ids) {
    m.info.promptCount = choice.prompt_token_ids.length;
    m.info.promptTail = choice.prompt_token_ids.slice(-server.cap);  // what /attention can take, at most
  }
  if (choice.token_ids) m.info.ids.push(...choice.token_ids);
  if (choice.drafted) m.info.drafted.push(...choice.drafted);  // a server with --draft: per token id
  if (choice.logprobs?.content) m.info.tokens.push(...choice.logprobs.content);
  if (choice.delta?.content) m.content += choice.delta.content;
  if (choice.delta?.mcp_calls) m.calls = [...(m.calls || []), ...choice.delta.mcp_calls];
  if (choice.finish_reason) m.info.finish = choice.finish_reason;
}

function busy(on) {
  $("send").hidden = on;
  $("stop").hidden = !on;
  if (on) $("stop").focus();
}

async function send(event) {
  event.preventDefault();
  const text = $("message").value;
  if (!text.trim() || controller) return;
  chat().messages.push({role: "user", content: text});
  $("message").value = "";
  await reply();
  $("message").focus();
}

async function regenerate() {
  const c = chat();
  if (c.messages.at(-1)?.role === "assistant") c.messages.pop();
  await reply();
}

function editTurn(item, index) {
  const c = chat();
  const box = Object.assign(document.createElement("textarea"), {value: c.messages[index].content, rows: 3});
  box.setAttribute("aria-label", t("edit"));
  const save = Object.assign(document.createElement("button"), {type: "button", textContent: t("save_send")});
  const cancel = Object.assign(document.createElement("button"), {type: "button", className: "secondary",
                                                                  textContent: t("cancel")});
  save.addEventListener("click", async () => {
    c.messages.splice(index);  // this turn and everything after it go; the edited turn is sent again
    c.messages.push({role: "user", content: box.value});
    await reply();
  });
  cancel.addEventListener("click", renderMessages);
  box.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); save.click(); }
    if (e.key === "Escape") renderMessages();
  });
  const actions = document.createElement("div");
  actions.className = "row";
  actions.append(save, cancel);
  item.querySelector(".msg-body").replaceChildren(box, actions);
  box.focus();
}

// ---- settings ----
const FIELDS = {temperature: "temperature", top_p: "top-p", top_k: "top-k", max_tokens: "max-tokens", seed: "seed",
                schema: "schema"};

function currentSettings() {
  return Object.fromEntries(Object.entries(FIELDS).map(([name, id]) => [name, $(id).value]));
}

function showSettings(values) {
  for (const [name, id] of Object.entries(FIELDS)) $(id).value = values[name] ?? "";
}

function modelDefaults() {  // the checkpoint's generation.json, as the server reports it
  const d = server.decoding;
  return {temperature: d.temperature, top_p: d.top_p, top_k: d.top_k, max_tokens: d.max_new_tokens ?? "",
          seed: d.seed ?? "", schema: ""};
}

// ---- export and import (OpenAI's messages) ----
function exportChat() {
  const c = chat();
  const data = JSON.stringify({title: c.title, messages: apiMessages(c)}, null, 2);
  const link = Object.assign(document.createElement("a"), {download: `${c.title || "chat"}.json`,
                                                           href: URL.createObjectURL(new Blob([data]))});
  link.click();
  URL.revokeObjectURL(link.href);
}

async function importChat(file) {
  try {
    const data = JSON.parse(await file.text());
    const messages = Array.isArray(data) ? data : data.messages;
    if (!Array.isArray(messages) || !messages.every((m) => ["system", "user", "assistant"].includes(m?.role)
                                                           && typeof m.content === "string")) {
      throw new Error(t("import_shape"));
    }
    const system = messages.filter((m) => m.role === "system").map((m) => m.content).join("\n");
    current = null;
    Object.assign(chat(), {title: data.title || file.name.replace(/\.json$/, ""), system,
                           messages: messages.filter((m) => m.role !== "system")});
    saveChats();
    showChat();
    setStatus(t("imported", {name: file.name}));
  } catch (err) {
    setStatus(t("import_failed", {name: file.name, msg: err.message}), true);
  }
}

// ---- start ----
async function connect() {
  const health = await (await fetch("/health")).json();
  Object.assign(server, {maxLen: health.max_model_len || 0, cap: health.limits.max_attention_tokens,
                         decoding: health.decoding || {}});
  const tools = health.mcp_tools || [];  // a server with --mcp: how its tools are chosen, each reply
  $("tools").replaceChildren(...["auto", "required", "none"].map((c) => new Option(t(`tools_${c}`), c)),
                             ...tools.map((name) => new Option(name, name)));
  $("tools").hidden = $("tools-label").hidden = !tools.length;
  const stored = JSON.parse(localStorage.getItem(SETTINGS) || "null");
  showSettings(stored || modelDefaults());
  try {
    const models = (await (await api("/v1/models")).json()).data;
    server.model = models.find((m) => !m.parent).id;
    $("model-name").textContent = server.model;
    const adapters = models.filter((m) => m.parent);  // a server's --lora adapters: the select shows with them
    $("adapter").replaceChildren(new Option(t("base_model"), ""), ...adapters.map((m) => new Option(m.id, m.id)));
    $("adapter").hidden = $("adapter-label").hidden = !adapters.length;
    $("key-form").hidden = true;
    setStatus("");
  } catch (err) {
    setStatus(String(err.message || err), true);
  }
}

$("composer").addEventListener("submit", send);
$("message").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); $("composer").requestSubmit(); }
});
$("stop").addEventListener("click", () => controller?.abort());
$("new-chat").addEventListener("click", () => { current = null; chat(); saveChats(); showChat(); $("message").focus(); });
$("system").addEventListener("input", () => { chat().system = $("system").value; saveChats(); });
$("export").addEventListener("click", exportChat);
$("import").addEventListener("click", () => $("import-file").click());
$("import-file").addEventListener("change", (e) => { if (e.target.files[0]) importChat(e.target.files[0]); });
$("settings").addEventListener("input", () => localStorage.setItem(SETTINGS, JSON.stringify(currentSettings())));
$("reset-settings").addEventListener("click", () => { localStorage.removeItem(SETTINGS); showSettings(modelDefaults()); });
$("key-form").addEventListener("submit", (e) => {
  e.preventDefault();
  sessionStorage.setItem(KEY, $("key-input").value.trim());
  connect();
});
document.addEventListener("aiayn:language", () => { renderList(); renderMessages(); });
document.addEventListener("DOMContentLoaded", () => { showChat(); connect(); });  // inspect.js is loaded by then
