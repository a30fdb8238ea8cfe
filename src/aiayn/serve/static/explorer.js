// The attention explorer both pages share: kind / layer / head selects and an SVG heatmap that the mouse
// or the arrow keys walk over, and under it "inside one head" for the highlighted row.
// attentionExplorer(axesOf, inspect) -> {show(maps)}: maps is an /attention answer ({attention: {kind:
// [layer][head][row][col]}, heads}), axesOf(maps, kind) gives [row labels, col labels], and
// inspect(kind, layer, head, row) resolves to an /attention/head answer. Texts come from i18n.js's t().
"use strict";

// The pages' one POST helper: the JSON answer, or an Error "STATUS: detail".
async function postJSON(path, body) {
  const res = await fetch(path, {method: "POST", headers: {"Content-Type": "application/json"},
                                 body: JSON.stringify(body)});
  const data = await res.json().catch(() => ({}));
  if (!res.ok) {
    const detail = typeof data.detail === "string" ? data.detail : JSON.stringify(data.detail);
    throw new Error(`${res.status}: ${detail || res.statusText}`);
  }
  return data;
}

function attentionExplorer(axesOf, inspect) {
  const byId = (id) => document.getElementById(id);
  const CELL = 28, MIN_CELL = 10, LINE = 13;  // px: the largest and smallest cell, one line of label text
  let maps = null;        // the last /attention answer
  let active = [0, 0];    // the highlighted cell (row, col)
  const axes = () => axesOf(maps, byId("kind").value);

  function fillOptions(select, labels) {
    const keep = select.value;
    select.replaceChildren(...labels.map(([value, text]) => new Option(text, value)));
    if (labels.some(([value]) => value === keep)) select.value = keep;
  }

  function fillLayerHead() {
    const layers = maps.attention[byId("kind").value].length;
    fillOptions(byId("layer"), [...Array(layers).keys()].map((i) => [String(i), t("layer_n", {n: i + 1})]));
    const heads = [...Array(maps.heads).keys()].map((i) => [String(i), t("head_n", {n: i + 1})]);
    fillOptions(byId("head"), [["mean", t("mean_heads")], ...heads]);
  }

  function matrix() {
    const perHead = maps.attention[byId("kind").value][Number(byId("layer").value)];
    const head = byId("head").value;
    if (head !== "mean") return perHead[Number(head)];
    return perHead[0].map((row, r) => row.map((_, c) =>
      perHead.reduce((sum, h) => sum + h[r][c], 0) / perHead.length));
  }

  function color(w) {  // white -> deep blue
    const t = Math.max(0, Math.min(1, w));
    const mix = (a, b) => Math.round(a + (b - a) * t);
    return `rgb(${mix(247, 8)}, ${mix(251, 48)}, ${mix(255, 107)})`;
  }

  function svgEl(name, attrs, text) {
    const el = document.createElementNS("http://www.w3.org/2000/svg", name);
    for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
    if (text !== undefined) el.textContent = text;
    return el;
  }

  function draw() {
    const [rows, cols] = axes();
    const m = matrix();
    const left = 12 + 7.5 * Math.max(...rows.map((t) => t.length));
    const top = 12 + 7.5 * Math.max(...cols.map((t) => t.length));
    const svg = byId("heatmap");
    // long maps fit the panel: cells shrink (to MIN_CELL, then the panel scrolls) and labels thin out to one
    // every `every` tokens, so that labels never overlap; every cell keeps its tokens in its tooltip
    const room = byId("heatmap-wrap").clientWidth - left - 10;
    const size = Math.max(MIN_CELL, Math.min(CELL, Math.floor(room / cols.length)));
    const every = Math.ceil(LINE / size);
    svg.replaceChildren();
    svg.setAttribute("width", left + size * cols.length + 10);
    svg.setAttribute("height", top + size * rows.length + 10);
    cols.forEach((tok, c) => c % every || svg.append(svgEl("text", {class: "col-label", x: 0, y: 0,
      "text-anchor": "start", transform: `translate(${left + size * c + size / 2 + 4}, ${top - 6}) rotate(-90)`}, tok)));
    rows.forEach((tok, r) => r % every || svg.append(svgEl("text", {class: "row-label", x: left - 6,
      y: top + size * r + size / 2 + 4, "text-anchor": "end"}, tok)));
    m.forEach((row, r) => row.forEach((w, c) => {
      const rect = svgEl("rect", {class: "cell", x: left + size * c, y: top + size * r, width: size, height: size,
                                  fill: color(w), "data-row": r, "data-col": c, "data-weight": w.toFixed(4)});
      rect.append(svgEl("title", {}, `${rows[r]} → ${cols[c]}: ${w.toFixed(3)}`));
      svg.append(rect);
    }));
    active = [Math.min(active[0], rows.length - 1), Math.min(active[1], cols.length - 1)];
    svg.setAttribute("aria-label", `attention heatmap, ${rows.length} rows by ${cols.length} columns`);
    highlight(...active);
  }

  function highlight(r, c) {
    const [rows, cols] = axes();
    active = [r, c];
    document.querySelectorAll("#heatmap rect.cell.active").forEach((el) => el.classList.remove("active"));
    const cell = document.querySelector(`#heatmap rect.cell[data-row="${r}"][data-col="${c}"]`);
    if (!cell) return;
    cell.classList.add("active");
    cell.scrollIntoView({block: "nearest", inline: "nearest"});  // the keyboard's cell stays in view
    byId("cell-info").textContent = t("cell_info", {row: rows[r], col: cols[c], w: cell.dataset.weight});
    inside.show(byId("kind").value, byId("layer").value, byId("head").value, r, c);
  }

  let pointer = "";  // where the mouse last was: a map scrolled under a resting mouse is not a hover
  function onPointer(event) {
    const at = `${event.clientX},${event.clientY}`;
    const cell = event.target.closest("rect.cell");
    if (at === pointer || !cell) return;
    pointer = at;
    highlight(Number(cell.dataset.row), Number(cell.dataset.col));
  }

  function onKey(event) {
    const moves = {ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1]};
    if (!maps || !(event.key in moves)) return;
    const [rows, cols] = axes();
    event.preventDefault();
    const [dr, dc] = moves[event.key];
    highlight(Math.max(0, Math.min(rows.length - 1, active[0] + dr)),
              Math.max(0, Math.min(cols.length - 1, active[1] + dc)));
  }

  const inside = insidePanel(inspect);
  document.addEventListener("aiayn:language", () => { if (maps) { fillLayerHead(); highlight(...active); } });
  byId("kind").addEventListener("change", () => { fillLayerHead(); draw(); });
  byId("layer").addEventListener("change", draw);
  byId("head").addEventListener("change", draw);
  byId("heatmap").addEventListener("keydown", onKey);
  byId("heatmap").addEventListener("mousemove", onPointer);
  window.addEventListener("resize", () => { if (maps) draw(); });
  return { show(newMaps) { maps = newMaps; fillLayerHead(); draw(); } };
}

// "Inside one head": the query vector, and per key its vector, score, mask, weight and value, then the output.
const INSIDE_HTML = `
    <div id="inside" aria-labelledby="inside-title">
    <h3 id="inside-title" data-i18n="inside_title">Inside one head</h3>
    <p class="hint" data-i18n="inside_hint"></p>
    <p id="inside-query" aria-live="polite"></p>
    <div id="inside-body" hidden>
    <p class="vec-row"><strong data-i18n="q_vector">query vector q</strong> <span id="inside-q"></span></p>
    <div class="table-wrap">
    <table id="inside-table">
    <thead><tr><th data-i18n="th_key">key token</th><th data-i18n="th_k">key vector k</th>
    <th data-i18n="th_score">q·k / √d_k</th><th data-i18n="th_mask">mask</th>
    <th data-i18n="th_weight">softmax weight</th><th data-i18n="th_v">value vector v</th></tr></thead>
    <tbody id="inside-rows"></tbody>
    </table>
    </div>
    <p class="vec-row"><strong data-i18n="output">output</strong> <span id="inside-out"></span></p>
    </div>
    </div>`;

function insidePanel(inspect) {
  const byId = (id) => document.getElementById(id);
  if (inspect && !byId("inside")) {  // the panel goes under the heatmap, in the page's language
    byId("explorer").insertAdjacentHTML("beforeend", INSIDE_HTML);
    applyLanguage();
  }
  let shown = "";       // which (kind, layer, head, row) the panel holds
  let asked = 0;        // answers to older questions are dropped
  let data = null;      // the last answer, and the key it answers
  let dataKey = "";
  let activeCol = 0;    // the key (column) highlighted in the table

  function el(name, attrs = {}, ...children) {
    const node = document.createElement(name);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    node.append(...children);
    return node;
  }

  function bar(value, scale, signed) {  // a bar of |value| / scale, blue (positive) or red (negative)
    const width = Math.round(60 * Math.min(1, Math.abs(value) / scale));
    return el("span", {class: `bar ${signed && value < 0 ? "neg" : "pos"}`, style: `width:${width}px`});
  }

  function vector(values) {  // a strip of small bars, with the numbers behind a disclosure
    const scale = Math.max(...values.map(Math.abs), 1e-9);
    const strip = el("span", {class: "strip", "aria-hidden": "true"}, ...values.map((v) => {
      const height = Math.round(14 * Math.abs(v) / scale);
      return el("span", {class: v < 0 ? "neg" : "pos", style: `height:${Math.max(1, height)}px`, title: v.toFixed(4)});
    }));
    const numbers = el("details", {}, el("summary", {}, t("numbers")),
                       el("code", {}, `[${values.map((v) => v.toFixed(4)).join(", ")}]`));
    return el("span", {class: "vector"}, strip, numbers);
  }

  function render() {
    const col = activeCol;
    byId("inside-query").textContent = t("inside_query", {token: data.query_token, row: data.query_index + 1,
      layer: data.layer + 1, head: data.head + 1, dk: data.query.length, scale: data.scale.toFixed(3)}) +
      (data.group > 1 ? t("inside_kv", {kv: data.kv_head + 1, group: data.group}) : "");
    byId("inside-q").replaceChildren(vector(data.query));
    const top = Math.max(...data.scores.map(Math.abs), 1e-9);
    byId("inside-rows").replaceChildren(...data.key_tokens.map((token, j) => el("tr",
      {class: j === col ? "active" : "", "data-key": j},
      el("th", {scope: "row"}, token), el("td", {}, vector(data.keys[j])),
      el("td", {class: "num"}, bar(data.scores[j], top, true), data.scores[j].toFixed(4)),
      el("td", {class: data.mask[j] ? "" : "masked"}, data.mask[j] ? `✓ ${t("may_attend")}` : `✗ ${t("masked")}`),
      el("td", {class: "num", "data-weight": data.weights[j].toFixed(4)}, bar(data.weights[j], 1, false),
         data.weights[j].toFixed(4)),
      el("td", {}, vector(data.values[j])))));
    byId("inside-out").replaceChildren(vector(data.output));
    byId("inside-body").hidden = false;
  }

  async function show(kind, layer, head, row, col) {
    if (!inspect) return;
    activeCol = col;
    if (head === "mean") {
      shown = "";
      ++asked;  // an answer still on its way is stale now: it must not reopen the panel
      byId("inside-body").hidden = true;
      byId("inside-query").textContent = t("inside_pick");
      return;
    }
    const key = [kind, layer, head, row].join("/");
    if (key === dataKey) { shown = key; ++asked; render(); return; }  // drop any answer on its way
    if (key === shown) return;  // already asked
    shown = key;
    const mine = ++asked;
    try {
      const answer = await inspect(kind, Number(layer), Number(head), row);
      if (mine !== asked) return;
      [data, dataKey] = [answer, key];
      render();
    } catch (err) {
      if (mine === asked) byId("inside-query").textContent = String(err.message || err);
    }
  }
  return {show};
}
