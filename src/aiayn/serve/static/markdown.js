// A model's reply as Markdown, built as DOM nodes: whatever the model writes stays text (textContent and text
// nodes only, never innerHTML), so no reply runs as HTML or script. Blocks: fenced code (with a copy button),
// headings, lists, tables, paragraphs; inline: code, bold, italics and http(s) links. renderMarkdown(text) ->
// a DocumentFragment. An unclosed fence (a reply still streaming) runs to the end.
"use strict";

const FENCE = /^\s*(```|~~~)\s*([\w+#.-]*)\s*$/;
const ITEM = /^\s*([-*+]|\d{1,9}[.)])\s+(.*)$/;
const RULE = /^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$/;

function mdEl(name, className) {
  const node = document.createElement(name);
  if (className) node.className = className;
  return node;
}

function renderMarkdown(source) {
  const root = document.createDocumentFragment();
  const lines = String(source).replace(/\r\n?/g, "\n").split("\n");
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (FENCE.test(line)) { i = codeBlock(root, lines, i); continue; }
    if (!line.trim()) { i++; continue; }
    const heading = line.match(/^(#{1,6})\s+(.*)$/);
    if (heading) {
      root.append(inline(mdEl(`h${Math.min(6, heading[1].length + 2)}`), heading[2]));
      i++;
    } else if (isTable(lines, i)) {
      i = table(root, lines, i);
    } else if (ITEM.test(line)) {
      i = list(root, lines, i);
    } else {
      const para = [];
      while (i < lines.length && lines[i].trim() && !startsBlock(lines, i)) para.push(lines[i++]);
      root.append(inline(mdEl("p"), para.join("\n")));
    }
  }
  return root;
}

function startsBlock(lines, i) {
  return FENCE.test(lines[i]) || /^#{1,6}\s/.test(lines[i]) || ITEM.test(lines[i]) || isTable(lines, i);
}

function isTable(lines, i) {
  return lines[i].includes("|") && i + 1 < lines.length && RULE.test(lines[i + 1]) && lines[i + 1].includes("-");
}

function codeBlock(root, lines, i) {
  const [, mark, lang] = lines[i].match(FENCE);
  const body = [];
  i++;
  while (i < lines.length && lines[i].trim() !== mark) body.push(lines[i++]);
  const box = mdEl("div", "code");
  const copy = mdEl("button", "secondary copy");
  copy.type = "button";
  copy.dataset.i18n = "copy";
  copy.textContent = t("copy");
  const code = mdEl("code");
  code.textContent = body.join("\n");
  if (lang) code.dataset.lang = lang;
  copy.addEventListener("click", () => copyText(code.textContent, copy));
  const pre = mdEl("pre");
  pre.append(code);
  box.append(copy, pre);
  root.append(box);
  return i + 1;  // past the closing fence
}

async function copyText(text, button) {
  try {
    await navigator.clipboard.writeText(text);
    button.textContent = t("copied");
  } catch {  // no clipboard (an insecure origin): select the code so that Ctrl+C copies it
    const range = document.createRange();
    range.selectNodeContents(button.nextElementSibling);
    getSelection().removeAllRanges();
    getSelection().addRange(range);
  }
}

function cells(line) {
  return line.trim().replace(/^\|/, "").replace(/\|$/, "").split("|").map((c) => c.trim());
}

function table(root, lines, i) {
  const wrap = mdEl("div", "table-wrap");
  const grid = mdEl("table", "md-table");
  const head = grid.createTHead().insertRow();
  for (const c of cells(lines[i])) head.append(inline(mdEl("th"), c));
  const body = grid.createTBody();
  i += 2;
  while (i < lines.length && lines[i].includes("|") && lines[i].trim()) {
    const row = body.insertRow();
    for (const c of cells(lines[i++])) row.append(inline(mdEl("td"), c));
  }
  wrap.append(grid);
  root.append(wrap);
  return i;
}

function list(root, lines, i) {
  const ordered = /^\s*\d/.test(lines[i]);
  const box = mdEl(ordered ? "ol" : "ul");
  while (i < lines.length && ITEM.test(lines[i]) && /^\s*\d/.test(lines[i]) === ordered) {
    box.append(inline(mdEl("li"), lines[i++].match(ITEM)[2]));
  }
  root.append(box);
  return i;
}

const INLINE = /(`[^`\n]+`)|(\*\*[^*\n]+\*\*)|(\*[^*\s][^*\n]*\*)|(\[[^\]\n]+\]\(https?:\/\/[^\s)]+\))/g;

function inline(parent, text) {
  let last = 0;
  for (const match of text.matchAll(INLINE)) {
    addText(parent, text.slice(last, match.index));
    const [whole, code, bold, italic] = match;
    if (code) parent.append(Object.assign(mdEl("code"), {textContent: whole.slice(1, -1)}));
    else if (bold) parent.append(inline(mdEl("strong"), whole.slice(2, -2)));
    else if (italic) parent.append(inline(mdEl("em"), whole.slice(1, -1)));
    else {
      const [, label, href] = whole.match(/^\[([^\]]+)\]\((.*)\)$/);
      const link = Object.assign(mdEl("a"), {href, rel: "noopener noreferrer nofollow", target: "_blank"});
      parent.append(inline(link, label));
    }
    last = match.index + whole.length;
  }
  addText(parent, text.slice(last));
  return parent;
}

function addText(parent, text) {
  text.split("\n").forEach((part, k) => {
    if (k) parent.append(mdEl("br"));
    if (part) parent.append(document.createTextNode(part));
  });
}
