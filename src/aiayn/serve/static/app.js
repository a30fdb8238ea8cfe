// The translation page: translate through POST /translate, then draw POST /attention and, for the highlighted
// row of one head, POST /attention/head (explorer.js).
"use strict";

const $ = (id) => document.getElementById(id);

function setStatus(text, isError = false) {
  $("status").textContent = text;
  $("status").classList.toggle("error", isError);
}

async function translate(event) {
  event.preventDefault();
  const source = $("source").value.trim();
  if (!source) { setStatus(t("type_first"), true); return; }
  $("translate").disabled = true;
  setStatus(t("translating"));
  try {
    const {translation} = await postJSON("/translate", {text: source, beam_size: Number($("beam").value)});
    $("translation").textContent = translation;
    pair = {source, target: translation};
    const maps = await postJSON("/attention", pair);
    $("explorer").hidden = false;
    explorer.show(maps);
    setStatus(t("done"));
  } catch (err) {
    setStatus(t("cannot_translate", {msg: err.message}), true);
  } finally {
    $("translate").disabled = false;
  }
}

let pair = null;  // the source and translation the explorer shows
const explorer = attentionExplorer((maps, kind) => {
  if (kind === "encoder") return [maps.source_tokens, maps.source_tokens];
  return [maps.target_tokens, kind === "cross" ? maps.source_tokens : maps.target_tokens];
}, (kind, layer, head, query) => postJSON("/attention/head", {...pair, kind, layer, head, query}));

$("translate-form").addEventListener("submit", translate);
$("source").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) $("translate-form").requestSubmit();
});
