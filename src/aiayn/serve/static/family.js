// The page for a language model (streamed continuation, then the attention explorer with inside one head) or
// a masked language model (top-k bars).
const $ = (id) => document.getElementById(id);
const status = (text, error = false) => { $("status").textContent = text; $("status").className = error ? "error" : ""; };

async function generateText() {
  const button = $("generate");
  button.disabled = true;
  $("continuation").textContent = "";
  status(t("generating"));
  try {
    const body = { prompt: $("prompt").value, max_new_tokens: Number($("max-new").value),
                   temperature: Number($("temperature").value), stream: true };
    const response = await fetch("/generate", { method: "POST", headers: { "content-type": "application/json" },
                                                body: JSON.stringify(body) });
    if (!response.ok) throw new Error((await response.json()).detail);
    for await (const event of sseEvents(response)) {
      if (event.finish_reason) status(t("tokens_done", {n: event.completion_tokens, reason: event.finish_reason}));
      else $("continuation").textContent += event.text;
    }
    await showAttention(body.prompt + $("continuation").textContent);
  } catch (err) {
    status(String(err.message || err), true);
  } finally {
    button.disabled = false;
  }
}

let shownText = "";  // the text the explorer shows
const explorer = attentionExplorer((maps) => [maps.tokens, maps.tokens],
  (kind, layer, head, query) => postJSON("/attention/head", { text: shownText, layer, head, query }));

async function showAttention(text) {
  shownText = text;
  const response = await fetch("/attention", { method: "POST", headers: { "content-type": "application/json" },
                                               body: JSON.stringify({ text }) });
  const data = await response.json();
  if (!response.ok) { $("explorer").hidden = true; return; }  // e.g. longer than /attention takes
  $("explorer").hidden = false;
  explorer.show(data);
}

async function fillMask() {
  status(t("predicting"));
  const response = await fetch("/fill-mask", { method: "POST", headers: { "content-type": "application/json" },
                                               body: JSON.stringify({ text: $("masked").value, top_k: 5 }) });
  const data = await response.json();
  if (!response.ok) { status(String(data.detail), true); return; }
  const box = $("predictions");
  box.textContent = "";
  data.masks.forEach((cands, i) => {
    const list = document.createElement("ol");
    list.setAttribute("aria-label", `mask ${i + 1}`);
    for (const c of cands) {
      const item = document.createElement("li");
      const bar = document.createElement("span");
      bar.className = "bar";
      bar.style.cssText = `display:inline-block;height:0.8em;background:var(--accent);width:${Math.round(c.probability * 200)}px;margin-right:0.5em`;
      item.append(bar, `${c.token.trim() || JSON.stringify(c.token)} ${c.probability.toFixed(3)}`);
      list.append(item);
    }
    box.append(list);
  });
  status("");
}

async function init() {
  const health = await (await fetch("/health")).json();
  const arch = health.model.arch;
  const what = () => { $("what").textContent = t("what", {arch, d: health.model.d_model, h: health.model.n_heads}); };
  what();
  document.addEventListener("aiayn:language", what);
  const lm = arch === "decoder-only";
  $("chat-link").hidden = !health.chat;  // a chat model's page is the chat; this one is a click away
  $(lm ? "lm" : "mlm").hidden = false;
  const [input, run] = lm ? ["prompt", generateText] : ["masked", fillMask];
  $(lm ? "generate" : "fill").addEventListener("click", run);
  $(input).addEventListener("keydown", (e) => { if (e.key === "Enter" && e.ctrlKey) run(); });
}
init();
