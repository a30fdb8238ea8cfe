// Inside one token of a chat reply (chat.js keeps each reply's log-probabilities and token ids): the alternatives
// the model weighed at that step (the stream's top_logprobs), where the token looked (POST /attention with the
// conversation's ids and the token's row: every layer and head), a per-head summary (attention on the previous
// token and on the chat template's markers), and for a mixture of experts the experts it went to.
"use strict";

let inspected = null;  // the /attention answer shown: {tokens, heads, attention: {decoder_self}, experts?}
let openings = 0;  // tokens opened so far: an answer to an earlier one is dropped
const MARKER = /^<[|｜]?[^<>\s]{1,40}[|｜]?>$/;  // <|im_start|>, <start_of_turn>, </s>: a template's marker

function visible(text) {  // a token's text (or a byte-level or SentencePiece piece) with its spaces and breaks seen
  return text.replace(/[ Ġ▁]/g, "·").replace(/[\nĊ]/g, "⏎").replace(/\t/g, "⇥") || "∅";
}

function toggleTokens(item, m) {
  const body = item.querySelector(".msg-body");
  if (!item.classList.toggle("as-tokens")) { fillBody(body, m); return; }
  body.replaceChildren(...m.info.tokens.map((entry, k) => {
    const p = Math.exp(entry.logprob);
    const button = Object.assign(document.createElement("button"), {type: "button", className: "tok",
                                                                    textContent: visible(entry.token)});
    button.title = `p = ${p.toFixed(3)}`;
    if (m.info.drafted?.[k]) {  // speculative decoding: the draft guessed this token and the model agreed
      button.classList.add("drafted");
      button.title += ` · ${t("drafted_title")}`;
    }
    button.style.background = `rgba(240, 180, 41, ${(0.6 * (1 - p)).toFixed(2)})`;  // the less sure, the deeper
    button.addEventListener("click", () => openToken(m, k, button));
    return button;
  }));
}

function closeInspector() {
  $("inspect").hidden = true;
  inspected = null;
}

async function openToken(m, k, button) {
  document.querySelectorAll(".tok.chosen").forEach((b) => b.classList.remove("chosen"));
  button.classList.add("chosen");
  const entry = m.info.tokens[k];
  $("inspect").hidden = false;
  $("inspect-token").textContent = t("token_at", {token: visible(entry.token), k: k + 1,
                                                  p: (100 * Math.exp(entry.logprob)).toFixed(1)});
  showAlternatives(entry);
  const ids = m.info.promptTail.concat(m.info.ids.slice(0, k + 1)).slice(-server.cap);
  const total = m.info.promptCount + k + 1;
  $("attention-note").textContent = total > ids.length ? t("attention_cut", {n: ids.length, total})
    : t("attention_all", {n: ids.length});
  const asked = ++openings;
  let answer;
  try {
    answer = await (await api("/attention", {ids, row: ids.length - 1})).json();
  } catch (err) {
    $("attention-note").textContent = String(err.message || err);
    return;
  }
  if (asked !== openings) return;  // another token was opened meanwhile: its answer is the one to show
  inspected = answer;
  const layers = inspected.attention.decoder_self.length;
  $("att-layer").replaceChildren(...[...Array(layers).keys()].map((i) => new Option(t("layer_n", {n: i + 1}), i)));
  $("att-head").replaceChildren(new Option(t("mean_heads"), "mean"),
    ...[...Array(inspected.heads).keys()].map((i) => new Option(t("head_n", {n: i + 1}), i)));
  drawAttention();
  headSummary();
  showExperts();
  $("inspect-title").scrollIntoView({block: "nearest"});
}

function showAlternatives(entry) {
  $("alternatives").replaceChildren(...(entry.top_logprobs || []).map((alt) => {
    const p = Math.exp(alt.logprob);
    const item = document.createElement("li");
    item.dataset.p = String(p);
    item.classList.toggle("chosen", alt.token === entry.token && alt.logprob === entry.logprob);  // (tokens may print alike)
    const bar = Object.assign(document.createElement("span"), {className: "bar pos"});
    bar.style.width = `${Math.max(1, Math.round(p * 120))}px`;
    item.append(bar, `${visible(alt.token)}  ${(100 * p).toFixed(1)}%`);
    return item;
  }));
}

function rowOf(layer, head) {  // the token's weights over the conversation, (T,): one head or their mean
  const heads = inspected.attention.decoder_self[layer];
  if (head !== "mean") return heads[Number(head)][0];
  return heads[0][0].map((_, j) => heads.reduce((sum, h) => sum + h[0][j], 0) / heads.length);
}

function drawAttention() {
  const weights = rowOf(Number($("att-layer").value), $("att-head").value);
  const top = Math.max(...weights);
  $("attention-text").replaceChildren(...inspected.tokens.map((token, j) => {
    const span = Object.assign(document.createElement("span"), {className: "att", textContent: visible(token)});
    span.style.background = `rgba(36, 86, 199, ${(0.85 * weights[j] / top).toFixed(3)})`;
    span.style.color = weights[j] / top > 0.55 ? "#fff" : "inherit";
    span.title = `${(100 * weights[j]).toFixed(1)}%`;
    return span;
  }));
}

function headSummary() {  // per layer and head: the share on the previous token (blue) and on markers (orange)
  const n = inspected.tokens.length;
  const markers = inspected.tokens.map((token) => MARKER.test(token.trim()));
  const body = layerTable($("head-summary"), inspected.heads);
  inspected.attention.decoder_self.forEach((heads, layer) => {
    const row = layerRow(body, layer);
    heads.forEach(([weights], h) => {
      const previous = n > 1 ? weights[n - 2] : 0;
      const marked = weights.reduce((sum, w, j) => sum + (markers[j] ? w : 0), 0);
      const cell = row.insertCell();
      cell.title = t("head_share", {prev: (100 * previous).toFixed(0), markers: (100 * marked).toFixed(0)});
      cell.className = "share";
      cell.tabIndex = 0;
      cell.append(shareBar(previous, "prev"), shareBar(marked, "marker"));
      const pick = () => { $("att-layer").value = layer; $("att-head").value = h; drawAttention(); };
      cell.addEventListener("click", pick);
      cell.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); pick(); } });
    });
  });
}

function layerTable(table, columns) {  // a table emptied, headed 1..columns; returns its body
  table.replaceChildren();
  const head = table.createTHead().insertRow();
  head.append(document.createElement("th"));
  for (let c = 0; c < columns; c++) head.append(Object.assign(document.createElement("th"), {textContent: c + 1}));
  return table.createTBody();
}

function layerRow(body, layer) {  // a row of ``body`` led by the layer's name
  const row = body.insertRow();
  row.append(Object.assign(document.createElement("th"), {textContent: t("layer_n", {n: layer + 1})}));
  return row;
}

function shareBar(share, kind) {
  const bar = Object.assign(document.createElement("span"), {className: `share-bar ${kind}`});
  bar.style.opacity = (0.1 + 0.9 * share).toFixed(2);
  return bar;
}

function showExperts() {
  const weights = inspected.experts;
  $("experts-box").hidden = !weights;
  if (!weights) return;
  const body = layerTable($("experts"), weights[0].length);
  weights.forEach((row, layer) => {
    const tr = layerRow(body, layer);
    row.forEach((w) => {
      const cell = tr.insertCell();
      cell.textContent = w > 0 ? w.toFixed(2) : "";
      cell.style.background = `rgba(36, 86, 199, ${(0.8 * w).toFixed(2)})`;
    });
  });
}

$("att-layer").addEventListener("change", drawAttention);
$("att-head").addEventListener("change", drawAttention);
document.addEventListener("aiayn:language", () => { if (inspected) { headSummary(); showExperts(); } });
