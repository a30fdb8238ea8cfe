// The pages' labels and help text in English and Chinese. An element with data-i18n="key" shows the text of
// that key (data-i18n-placeholder: its placeholder); scripts build their own text with t(key, {vars}). The
// #lang button switches language and the choice is remembered; a "aiayn:language" event tells the scripts.
"use strict";

const STRINGS = {
  en: {
    lang_toggle: "中文", tagline: "The Transformer of Attention Is All You Need: translate a sentence, then see "
      + "where every head looks, and inside one head.",
    translate_title: "Translate", source_label: "Source sentence",
    source_placeholder: "Type a sentence (Ctrl+Enter translates)", decoding: "Decoding",
    beam4: "beam search, 4 beams", greedy: "greedy", beam8: "beam search, 8 beams", translate: "Translate",
    translation: "Translation", attention: "Attention", kind: "Kind", layer: "Layer", head: "Head",
    kind_encoder: "encoder self-attention", kind_decoder_self: "decoder self-attention",
    kind_cross: "cross-attention", kind_causal: "causal self-attention",
    layer_n: "layer {n}", head_n: "head {n}", mean_heads: "mean of heads",
    hint_translation: "Rows attend to columns; each row sums to 1. Decoder rows are the tokens the decoder reads "
      + "(<s> first), each predicting the next. Hover a cell, or focus the map and use the arrow keys.",
    hint_lm: "Rows attend to columns; each row sums to 1 and sees only itself and the tokens before it (the upper "
      + "triangle is empty). Each row predicts the token after it. Hover a cell, or focus the map and use the "
      + "arrow keys.",
    cell_info: "{row} → {col}: weight {w}",
    inside_title: "Inside one head",
    inside_hint: "The highlighted row is the query. These are the model's own numbers for it: the query vector "
      + "q, every key k, the score q·k / √d_k, the mask, the softmax weights (the heatmap's row) and the output, "
      + "the weighted sum of the values v.",
    inside_pick: "Choose one head (not the mean) to see its arithmetic.",
    inside_query: "Query “{token}” (row {row}), layer {layer}, head {head}: d_k = {dk}, √d_k = {scale}",
    inside_kv: "; keys and values of key/value head {kv} (grouped-query attention: {group} query heads share it)",
    q_vector: "query vector q", th_key: "key token", th_k: "key vector k", th_score: "q·k / √d_k",
    th_mask: "mask", th_weight: "softmax weight", th_v: "value vector v", may_attend: "may attend",
    masked: "masked", output: "output = Σ weight × v", numbers: "numbers",
    translating: "Translating…", done: "Done.", type_first: "Type a sentence first.",
    cannot_translate: "Could not translate: {msg}",
    loading: "Loading the model…", what: "A {arch} Transformer (d_model {d}, {h} heads).",
    continue_title: "Continue a text", prompt: "Prompt", new_tokens: "New tokens", temperature: "Temperature",
    generate: "Generate", continuation: "Continuation (streamed as it is generated)",
    lm_attention: "Attention over prompt + continuation", fill_title: "Fill the mask",
    masked_label: "Text with one or more <mask>", fill: "Fill", generating: "Generating…",
    predicting: "Predicting…", tokens_done: "{n} tokens ({reason})",
    refinement: "Mask-Predict, iteration by iteration", iteration_n: "iteration {n}",
    mask_predict_n: "Mask-Predict, {n} iterations",
    hint_refinement: "A non-autoregressive model writes every position at once, then re-masks its least sure "
      + "tokens and predicts them again. Darker = more probable; framed = predicted at this iteration.",
    ctc_one_pass: "CTC, one pass", ctc_title: "CTC: what each position emits", ctc_inputs: "reads",
    ctc_emits: "emits",
    hint_ctc: "The decoder reads every source piece repeated, and each position emits a token or the blank ε in "
      + "one pass; repeats are merged and blanks dropped. Darker = more probable; framed = kept.",
    chat_title: "Chat", prompt_box_link: "Prompt box and attention explorer", chat_link: "Chat",
    key_label: "This server needs its API key", key_save: "Use this key", key_needed: "401: give the server's API key",
    key_hint: "Kept in this tab only (sessionStorage), sent as Authorization: Bearer.",
    chats: "Conversations", new_chat: "New chat", export: "Export", import: "Import", untitled: "(untitled)",
    rename: "Rename", delete: "Delete", delete_confirm: "Delete the conversation \"{title}\"?",
    system_prompt: "System prompt", system_placeholder: "How the assistant should behave (optional)",
    message: "Message", message_placeholder: "Message (Enter sends, Shift+Enter a new line)", send: "Send",
    stop: "Stop", stopped: "stopped", settings: "Settings", top_p: "Top-p", top_k: "Top-k (0: all)",
    max_tokens: "Max tokens", to_end_of_turn: "to the end of the turn", seed: "Seed", random: "random",
    adapter: "Adapter", base_model: "the base model", schema: "JSON schema of the answer (empty: free text)",
    tools: "Server's tools", tools_auto: "the model chooses", tools_required: "a call first", tools_none: "none",
    tool_call: "🔧 {name} {args}",
    reset_settings: "Model's defaults", user: "You", assistant: "Assistant", system: "System", edit: "Edit",
    save_send: "Save and send", cancel: "Cancel", regenerate: "Regenerate", show_tokens: "Show the tokens", tokens_short: "tokens",
    answering: "Answering…", copy: "Copy", copied: "Copied",
    stat_prompt: "{n} prompt tokens", stat_cached: "{n} cached", stat_completion: "{n} generated",
    stat_rate: "{n} tokens/s", stat_drafted: "{n} of them guessed by the draft and accepted",
    drafted_title: "guessed by the draft, accepted by the model", stat_ttft: "first token after {n} ms", context_used: "context: {n} of {max} tokens",
    bad_schema: "The JSON schema is not valid JSON: {msg}", import_shape: "expected a list of messages (OpenAI's "
      + "role and content) or an object with one", imported: "Imported {name}", import_failed: "Cannot import {name}: {msg}",
    inspect_title: "Inside this token", token_at: "Token {k} “{token}”, chosen with p = {p}%",
    alternatives: "What the model weighed", attention_from: "Where it looked",
    attention_all: "All {n} tokens of the conversation; darker = more attention from this token.",
    attention_cut: "The last {n} of the conversation's {total} tokens (the server's /attention cap); darker = more "
      + "attention from this token.",
    per_head: "Every head at a glance",
    per_head_hint: "One cell per layer and head: the upper bar is the share on the previous token, the lower one "
      + "the share on the chat template's markers (darker = more). Click a cell to see that head above.",
    head_share: "previous token {prev}%, template markers {markers}%", experts: "Experts this token went to",
  },
  zh: {
    lang_toggle: "English", tagline: "《Attention Is All You Need》中的 Transformer：翻译一个句子，看看每个注意力头"
      + "在看哪里，再深入其中一个头。",
    translate_title: "翻译", source_label: "源语言句子", source_placeholder: "输入一个句子（Ctrl+Enter 翻译）",
    decoding: "解码方式", beam4: "束搜索，束宽 4", greedy: "贪心搜索", beam8: "束搜索，束宽 8", translate: "翻译",
    translation: "译文", attention: "注意力", kind: "类型", layer: "层", head: "头",
    kind_encoder: "编码器自注意力", kind_decoder_self: "解码器自注意力（带掩码）",
    kind_cross: "交叉注意力（编码器-解码器注意力）", kind_causal: "因果自注意力",
    layer_n: "第 {n} 层", head_n: "第 {n} 个头", mean_heads: "各头平均",
    hint_translation: "每一行（查询）对各列（键）分配注意力权重，每行之和为 1。解码器的行是解码器读入的词元"
      + "（以 <s> 开头），每一行预测下一个词元。把鼠标停在格子上，或聚焦热力图后用方向键移动。",
    hint_lm: "每一行（查询）对各列（键）分配注意力权重，每行之和为 1，且只能看到自己和之前的词元（因果掩码让右上"
      + "三角为空）。每一行预测它后面的词元。把鼠标停在格子上，或聚焦热力图后用方向键移动。",
    cell_info: "{row} → {col}：权重 {w}",
    inside_title: "深入一个注意力头",
    inside_hint: "高亮的那一行就是查询。下面是模型自己算出的数字：查询向量 q、每个键向量 k、得分 q·k / √d_k、"
      + "掩码、softmax 权重（即热力图的这一行），以及输出：对值向量 v 的加权求和。",
    inside_pick: "请选择单个注意力头（而不是各头平均）来查看它的计算过程。",
    inside_query: "查询“{token}”（第 {row} 行），第 {layer} 层，第 {head} 个头：d_k = {dk}，√d_k = {scale}",
    inside_kv: "；键和值来自第 {kv} 个键值头（分组查询注意力：{group} 个查询头共用它）",
    q_vector: "查询向量 q", th_key: "键（词元）", th_k: "键向量 k", th_score: "q·k / √d_k", th_mask: "掩码",
    th_weight: "softmax 权重", th_v: "值向量 v", may_attend: "可见", masked: "被遮蔽",
    output: "输出 = Σ 权重 × v", numbers: "数值",
    translating: "正在翻译…", done: "完成。", type_first: "请先输入一个句子。", cannot_translate: "无法翻译：{msg}",
    loading: "正在加载模型…", what: "一个 {arch} Transformer（d_model {d}，{h} 个头）。",
    continue_title: "续写文本", prompt: "提示词", new_tokens: "新词元数", temperature: "温度", generate: "生成",
    continuation: "续写（边生成边显示）", lm_attention: "提示词与续写上的注意力", fill_title: "填充掩码",
    masked_label: "含一个或多个 <mask> 的文本", fill: "填充", generating: "正在生成…", predicting: "正在预测…",
    tokens_done: "{n} 个词元（{reason}）",
    refinement: "Mask-Predict：逐轮迭代", iteration_n: "第 {n} 轮", mask_predict_n: "Mask-Predict，{n} 轮迭代",
    hint_refinement: "非自回归模型一次写出所有位置，再把最没把握的词元重新遮蔽并再次预测。颜色越深概率越高；"
      + "带框的是本轮预测的位置。",
    ctc_one_pass: "CTC，一次解码", ctc_title: "CTC：每个位置输出什么", ctc_inputs: "读入", ctc_emits: "输出",
    hint_ctc: "解码器读入重复若干次的源语言片段，每个位置一次性输出一个词元或空白 ε；相邻重复合并、空白删去。"
      + "颜色越深概率越高；带框的是保留下来的。",
    chat_title: "对话", prompt_box_link: "提示词续写与注意力浏览器", chat_link: "对话",
    key_label: "此服务器需要 API 密钥", key_save: "使用此密钥", key_needed: "401：请输入服务器的 API 密钥",
    key_hint: "只保存在本标签页（sessionStorage），以 Authorization: Bearer 发送。",
    chats: "对话列表", new_chat: "新对话", export: "导出", import: "导入", untitled: "（未命名）",
    rename: "重命名", delete: "删除", delete_confirm: "删除对话“{title}”？",
    system_prompt: "系统提示词", system_placeholder: "助手应当如何回答（可选）",
    message: "消息", message_placeholder: "输入消息（Enter 发送，Shift+Enter 换行）", send: "发送",
    stop: "停止", stopped: "已停止", settings: "设置", top_p: "Top-p", top_k: "Top-k（0：全部）",
    max_tokens: "最多词元数", to_end_of_turn: "直到本轮结束", seed: "随机种子", random: "随机",
    adapter: "适配器", base_model: "基础模型", schema: "回答的 JSON Schema（留空：自由文本）",
    tools: "服务器的工具", tools_auto: "由模型决定", tools_required: "先调用一个工具", tools_none: "不用工具",
    tool_call: "🔧 {name} {args}",
    reset_settings: "模型默认值", user: "你", assistant: "助手", system: "系统", edit: "编辑",
    save_send: "保存并发送", cancel: "取消", regenerate: "重新生成", show_tokens: "显示词元", tokens_short: "词元",
    answering: "正在回答…", copy: "复制", copied: "已复制",
    stat_prompt: "提示词 {n} 个词元", stat_cached: "缓存命中 {n}", stat_completion: "生成 {n}",
    stat_rate: "{n} 词元/秒", stat_drafted: "其中 {n} 个由草稿猜出并被模型接受",
    drafted_title: "由草稿猜出，被模型接受", stat_ttft: "首个词元用时 {n} 毫秒", context_used: "上下文：已用 {n} / {max} 个词元",
    bad_schema: "JSON Schema 不是有效的 JSON：{msg}", import_shape: "需要消息列表（OpenAI 的 role 与 content）或包含"
      + "它的对象", imported: "已导入 {name}", import_failed: "无法导入 {name}：{msg}",
    inspect_title: "这个词元的内部", token_at: "第 {k} 个词元“{token}”，被选中的概率 {p}%",
    alternatives: "模型考虑过的候选", attention_from: "它看向哪里",
    attention_all: "对话的全部 {n} 个词元；颜色越深，这个词元给它的注意力越多。",
    attention_cut: "对话共 {total} 个词元，这里显示最后 {n} 个（服务器 /attention 的上限）；颜色越深，注意力越多。",
    per_head: "所有注意力头一览",
    per_head_hint: "每层每个头一格：上面的条是放在前一个词元上的注意力，下面的条是放在对话模板标记上的注意力"
      + "（越深越多）。点击一格，在上方查看该头。",
    head_share: "前一个词元 {prev}%，模板标记 {markers}%", experts: "这个词元去了哪些专家",
  },
};

let LANG = localStorage.getItem("aiayn-lang") === "zh" ? "zh" : "en";

function t(key, vars = {}) {
  let text = STRINGS[LANG][key] ?? STRINGS.en[key] ?? key;
  for (const [name, value] of Object.entries(vars)) text = text.replaceAll(`{${name}}`, String(value));
  return text;
}

function applyLanguage() {
  document.documentElement.lang = LANG === "zh" ? "zh-CN" : "en";
  document.querySelectorAll("[data-i18n]").forEach((el) => { el.textContent = t(el.dataset.i18n); });
  document.querySelectorAll("[data-i18n-placeholder]").forEach((el) => {
    el.placeholder = t(el.dataset.i18nPlaceholder);
  });
  document.dispatchEvent(new Event("aiayn:language"));
}

document.getElementById("lang").addEventListener("click", () => {
  LANG = LANG === "en" ? "zh" : "en";
  localStorage.setItem("aiayn-lang", LANG);
  applyLanguage();
});
applyLanguage();
