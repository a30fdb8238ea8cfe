// The translation page: translate through POST /translate, then draw POST /attention and, for the highlighted
// row of one head, POST /attention/head (explorer.js). A CMLM checkpoint (non-autoregressive, /health says
// model.cmlm) decodes with Mask-Predict and shows its refinement (POST /refinement) instead of attention; a CTC
// checkpoint (model.ctc_upsample) shows its one pass the same way: what each upsampled position emits.
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
    const options = nar === "ctc" ? {} : nar ? {iterations: choice} : {beam_size: choice};
    const {translation} = await postJSON("/translate", {text: source, ...options});
    $("translation").textContent = translation;
    if (nar) {
      showRefinement(await postJSON("/refinement", {source, ...options}));
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
// CTC: a row of the inputs (the source pieces, upsampled), then one row of what each position emits, framed
// where the collapse keeps it.
function showRefinement(found) {
  const table = $("refinement-table");
  table.replaceChildren();
  if (found.inputs) {
    const row = table.insertRow();
    row.insertCell().textContent = t("ctc_inputs");
    found.inputs.forEach((piece) => { row.insertCell().textContent = piece; });
  }
  found.steps.forEach((step, i) => {
    const row = table.insertRow();
    row.insertCell().textContent = found.inputs ? t("ctc_emits") : t("iteration_n", {n: i + 1});
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

let nar = "";  // a non-autoregressive checkpoint's strategy: mask-predict (choices: iterations) or ctc (one pass)
fetch("/health").then((r) => r.json()).then((health) => {
  const model = health.model || {};
  nar = model.cmlm ? "mask-predict" : model.ctc_upsample ? "ctc" : "";
  if (nar === "ctc") {
    $("beam").replaceChildren(new Option(t("ctc_one_pass"), "1"));
    $("refinement-title").dataset.i18n = "ctc_title";
    $("refinement").querySelector(".hint").dataset.i18n = "hint_ctc";
    document.addEventListener("aiayn:language", () => { $("beam").options[0].textContent = t("ctc_one_pass"); });
    applyLanguage();
  }
  if (nar !== "mask-predict") return;
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
