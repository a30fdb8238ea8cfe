// The translation page: translate through POST /translate, then draw POST /attention and, for the highlighted
// row of one head, POST /attention/head (explorer.js). A CMLM checkpoint (non-autoregressive, /health says
// model.cmlm) decodes with Mask-Predict and shows its refinement (POST /refinement) instead of attention.
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
    const choice = Number($("beam").value);
    const options = cmlm ? {iterations: choice} : {beam_size: choice};
    const {translation} = await postJSON("/translate", {text: source, ...options});
    $("translation").textContent = translation;
    if (cmlm) {
      showRefinement(await postJSON("/refinement", {source, iterations: choice}));
      setStatus(t("done"));
      return;
    }
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

// Mask-Predict: one row per iteration, a cell per target position: the token, its probability as the cell's
// shade, and a frame where the iteration predicted it (the first predicts all, later ones the re-masked).
function showRefinement(found) {
  const table = $("refinement-table");
  table.replaceChildren();
  found.steps.forEach((step, i) => {
    const row = table.insertRow();
    row.insertCell().textContent = t("iteration_n", {n: i + 1});
    step.tokens.forEach((token, j) => {
      const cell = row.insertCell();
      const p = step.probabilities[j];
      cell.textContent = token;
      cell.title = `p = ${p.toFixed(2)}`;
      cell.className = step.predicted[j] ? "predicted" : "kept";
      cell.style.background = `rgba(37, 99, 235, ${(0.1 + 0.8 * p).toFixed(2)})`;
      cell.style.color = p > 0.55 ? "#fff" : "#111";
    });
  });
  $("refinement").hidden = false;
}

let cmlm = false;  // a non-autoregressive checkpoint: the decoding choices are Mask-Predict's iterations
fetch("/health").then((r) => r.json()).then((health) => {
  cmlm = Boolean(health.model && health.model.cmlm);
  if (!cmlm) return;
  $("beam").replaceChildren(...[10, 4, 1].map((n) => {
    const option = new Option(t("mask_predict_n", {n}), String(n));
    option.dataset.n = String(n);
    return option;
  }));
  document.addEventListener("aiayn:language", () => {
    for (const option of $("beam").options) option.textContent = t("mask_predict_n", {n: option.dataset.n});
  });
});

let pair = null;  // the source and translation the explorer shows
const explorer = attentionExplorer((maps, kind) => {
  if (kind === "encoder") return [maps.source_tokens, maps.source_tokens];
  return [maps.target_tokens, kind === "cross" ? maps.source_tokens : maps.target_tokens];
}, (kind, layer, head, query) => postJSON("/attention/head", {...pair, kind, layer, head, query}));

$("translate-form").addEventListener("submit", translate);
$("source").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) $("translate-form").requestSubmit();
});
