// The attention explorer both pages share: kind / layer / head selects and an SVG heatmap that the mouse
// or the arrow keys walk over. attentionExplorer(axesOf) -> {show(maps)}, where maps is an /attention answer
// ({attention: {kind: [layer][head][row][col]}, heads}) and axesOf(maps, kind) gives [row labels, col labels].
"use strict";

function attentionExplorer(axesOf) {
  const byId = (id) => document.getElementById(id);
  const CELL = 28;
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
    fillOptions(byId("layer"), [...Array(layers).keys()].map((i) => [String(i), `layer ${i + 1}`]));
    const heads = [...Array(maps.heads).keys()].map((i) => [String(i), `head ${i + 1}`]);
    fillOptions(byId("head"), [["mean", "mean of heads"], ...heads]);
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
    svg.replaceChildren();
    svg.setAttribute("width", left + CELL * cols.length + 10);
    svg.setAttribute("height", top + CELL * rows.length + 10);
    cols.forEach((tok, c) => svg.append(svgEl("text", {class: "col-label", x: 0, y: 0, "text-anchor": "start",
      transform: `translate(${left + CELL * c + CELL / 2 + 4}, ${top - 6}) rotate(-90)`}, tok)));
    rows.forEach((tok, r) => svg.append(svgEl("text", {class: "row-label", x: left - 6,
      y: top + CELL * r + CELL / 2 + 4, "text-anchor": "end"}, tok)));
    m.forEach((row, r) => row.forEach((w, c) => {
      const rect = svgEl("rect", {class: "cell", x: left + CELL * c, y: top + CELL * r, width: CELL, height: CELL,
                                  fill: color(w), "data-row": r, "data-col": c, "data-weight": w.toFixed(4)});
      rect.append(svgEl("title", {}, `${rows[r]} → ${cols[c]}: ${w.toFixed(3)}`));
      rect.addEventListener("mouseenter", () => highlight(r, c));
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
    byId("cell-info").textContent = `${rows[r]} → ${cols[c]}: weight ${cell.dataset.weight}`;
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

  byId("kind").addEventListener("change", () => { fillLayerHead(); draw(); });
  byId("layer").addEventListener("change", draw);
  byId("head").addEventListener("change", draw);
  byId("heatmap").addEventListener("keydown", onKey);
  return { show(newMaps) { maps = newMaps; fillLayerHead(); draw(); } };
}
