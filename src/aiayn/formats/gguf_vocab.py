"""A GGUF file's tokenizer <-> a Hugging Face ``tokenizers`` tokenizer. GGUF keeps no ``tokenizer.json``: its
metadata lists the tokens (``tokenizer.ggml.tokens``), their kinds (``token_type``: 1 normal, 2 unknown, 3
control, 4 user-defined, 6 byte), and either the merges of a byte-level BPE (``tokenizer.ggml.model`` ``gpt2``,
split into words first by the regexes llama.cpp names ``tokenizer.ggml.pre``) or the scores of a
SentencePiece-style BPE (``llama``: merges in the order of the merged piece's score, byte fallback, a word-start
marker). Both are rebuilt here as llama.cpp reads them, and written back from an aiayn checkpoint's tokenizer.
"""

from __future__ import annotations

import json

from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers import Tokenizer as HFTokenizerModel

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6  # tokenizer.ggml.token_type
SPACE = "\u2581"  # SentencePiece's word-start marker
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_CONTRACTIONS = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
_LLAMA3 = _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_QWEN2 = _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
# tokenizer.ggml.pre -> the regexes that cut text into words, one after the other (llama.cpp's llama-vocab.cpp).
PRE_TOKENIZERS = {"gpt-2": (_GPT2,), "smollm": (r"\p{N}", _GPT2), "starcoder": (r"\p{N}", _GPT2),
                  "refact": (r"\p{N}", _GPT2), "qwen2": (_QWEN2,), "stablelm2": (_QWEN2,),
                  "llama-bpe": (_LLAMA3,), "llama3": (_LLAMA3,), "dbrx": (_LLAMA3,), "smaug-bpe": (_LLAMA3,)}
IGNORES_MERGES = ("llama-bpe", "llama3")  # a word in the vocabulary is one token whatever the merges say
# The same splits as Hugging Face's tokenizer.json files write them (llama.cpp spells the case-blind group out).
_HF_LLAMA3 = _LLAMA3.replace(_CONTRACTIONS, "(?i:'s|'t|'re|'ve|'m|'ll|'d)")
_HF_QWEN2 = _QWEN2.replace(_CONTRACTIONS, "(?i:'s|'t|'re|'ve|'m|'ll|'d)")


def tokenizer_from_gguf(meta: dict, source: str) -> tuple[str, dict]:
    """``tokenizer.json`` text and ``tokenizer_config.json`` settings (special tokens, ``add_bos_token``, the
    chat template) of a GGUF file's metadata (key -> value); ``source`` names the file in errors."""
    kind = meta.get("tokenizer.ggml.model")
    tokens = meta.get("tokenizer.ggml.tokens")
    if kind not in ("gpt2", "llama") or not tokens:
        raise ValueError(f"{source}: tokenizer.ggml.model {kind!r} is not read; aiayn reads gpt2 (byte-level BPE) "
                         "and llama (SentencePiece BPE) tokenizers with their tokens")
    types = list(meta.get("tokenizer.ggml.token_type") or [NORMAL] * len(tokens))
    tok = _byte_level(tokens, meta, source) if kind == "gpt2" else _sentencepiece(tokens, types, meta, source)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, k in zip(tokens, types, strict=True) if k == CONTROL])
    tok.add_tokens([AddedToken(t, special=False, normalized=False)
                    for t, k in zip(tokens, types, strict=True) if k == USER_DEFINED])
    config = _special_tokens(meta, tokens, kind)
    added = [meta.get(f"tokenizer.ggml.{end}_token_id") if config[f"add_{end}_token"] else None
             for end in ("bos", "eos")]  # what llama.cpp puts before and after a text
    if any(i is not None for i in added):
        first, last = ([tokens[i]] if i is not None else [] for i in added)
        tok.post_processor = processors.TemplateProcessing(
            single=" ".join([*first, "$A", *last]), pair=" ".join([*first, "$A", "$B", *last]),
            special_tokens=[(tokens[i], i) for i in dict.fromkeys(i for i in added if i is not None)])
    return tok.to_str(), config


def _byte_level(tokens: list[str], meta: dict, source: str) -> HFTokenizerModel:
    pre = meta.get("tokenizer.ggml.pre", "gpt-2")
    if pre == "default":
        pre = "gpt-2"
    if pre not in PRE_TOKENIZERS:
        raise ValueError(f"{source}: tokenizer.ggml.pre {pre!r} is not read; aiayn splits words as "
                         f"{', '.join(PRE_TOKENIZERS)}")
    merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges") or []]
    tok = HFTokenizerModel(models.BPE({t: i for i, t in enumerate(tokens)}, merges,
                                      ignore_merges=pre in IGNORES_MERGES))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in PRE_TOKENIZERS[pre]]
        + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    return tok


def _sentencepiece(tokens: list[str], types: list[int], meta: dict, source: str) -> HFTokenizerModel:
    scores = meta.get("tokenizer.ggml.scores") or [0.0] * len(tokens)
    vocab = {t: i for i, t in enumerate(tokens)}
    unk = meta.get("tokenizer.ggml.unknown_token_id", next((i for i, k in enumerate(types) if k == UNKNOWN), None))
    tok = HFTokenizerModel(models.BPE(vocab, _merges_by_score(tokens, types, scores, vocab),
                                      unk_token=None if unk is None else tokens[unk], byte_fallback=True,
                                      fuse_unk=True))
    prefix = meta.get("tokenizer.ggml.add_space_prefix", True)
    steps = [normalizers.Prepend(SPACE)] if prefix else []
    tok.normalizer = normalizers.Sequence([*steps, normalizers.Replace(" ", SPACE)])
    tok.decoder = decoders.Sequence([decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse(),
                                     *([decoders.Strip(" ", 1, 0)] if prefix else [])])
    return tok


def _merges_by_score(tokens, types, scores, vocab) -> list[tuple[str, str]]:
    """SentencePiece's BPE as merges: every split of a piece into two pieces, the highest-scoring piece first."""
    found = []
    for token, kind, score in zip(tokens, types, scores, strict=True):
        if kind not in (NORMAL, USER_DEFINED):
            continue
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in vocab and right in vocab:
                found.append((-score, vocab[left], vocab[right], left, right))
    return [(left, right) for *_, left, right in sorted(found)]


def _special_tokens(meta: dict, tokens: list[str], kind: str) -> dict:
    """``tokenizer_config.json`` settings from the metadata (llama.cpp adds BOS to a SentencePiece vocabulary
    unless the file says not to)."""
    config = {"add_bos_token": bool(meta.get("tokenizer.ggml.add_bos_token", kind == "llama")),
              "add_eos_token": bool(meta.get("tokenizer.ggml.add_eos_token", False))}
    for name, key in (("bos_token", "bos"), ("eos_token", "eos"), ("unk_token", "unknown"), ("pad_token", "padding")):
        index = meta.get(f"tokenizer.ggml.{key}_token_id")
        if index is not None and 0 <= index < len(tokens):
            config[name] = tokens[index]
    if meta.get("tokenizer.chat_template"):
        config["chat_template"] = meta["tokenizer.chat_template"]
    return config


def gguf_tokenizer_fields(tokenizers) -> dict:
    """The ``tokenizer.ggml.*`` (and ``tokenizer.chat_template``) metadata of an aiayn checkpoint's tokenizer:
    an imported byte-level BPE (``tokenizer.json``) or aiayn's SentencePiece BPE model."""
    from aiayn.tokenizers.hf import HFTokenizers

    if isinstance(tokenizers, HFTokenizers):
        return _byte_level_fields(tokenizers)
    return _sentencepiece_fields(tokenizers.src)


def _byte_level_fields(tokenizers) -> dict:
    """An imported ``tokenizer.json``'s fields: a byte-level BPE (``gpt2``: its merges and word split) or a
    SentencePiece-style BPE (``llama``: byte fallback, the word-start marker; Gemma's, Llama 2's)."""
    spec = json.loads(tokenizers.src.proto)
    model = spec.get("model") or {}
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    tok = tokenizers.src.tok
    size = tok.get_vocab_size(with_added_tokens=True)
    tokens = [tok.id_to_token(i) for i in range(size)]
    added = tok.get_added_tokens_decoder()
    types = [(CONTROL if added[i].special else USER_DEFINED) if i in added else NORMAL for i in range(size)]
    if model.get("type") == "BPE" and _is_byte_level(spec):
        fields = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": _pre_name(spec),
                  "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": types, "tokenizer.ggml.merges": merges}
    elif model.get("type") == "BPE" and model.get("byte_fallback"):
        fields = _sentencepiece_bpe(spec, tokens, types, merges, model.get("unk_token"))
    else:
        raise ValueError("tokenizer.json: GGUF keeps byte-level BPE and SentencePiece BPE tokenizers; this one is "
                         f"{model.get('type')} with neither byte-level pieces nor byte fallback")
    return {**fields, **_config_fields(tokenizers, tok)}


def _sentencepiece_bpe(spec: dict, tokens: list[str], types: list[int], merges: list[str], unk: str | None) -> dict:
    """``llama`` fields of a SentencePiece BPE in tokenizer.json form: llama.cpp merges the pair whose joined piece
    scores highest, so each piece scores minus the rank of the first merge that makes it (the merges' order)."""
    steps = [s for s in _steps(spec.get("pre_tokenizer")) if not (s.get("type") == "Metaspace" and not s.get(
        "split", True))]
    if steps:
        raise ValueError(f"tokenizer.json: a SentencePiece BPE that splits words first ({steps[0].get('type')}); "
                         "llama.cpp's SentencePiece tokenizer does not")
    rank = {}
    for i, merge in enumerate(merges):
        rank.setdefault(merge.replace(" ", "", 1) if merge.count(" ") else merge, i)
    scores = [-float(rank.get(t, len(merges))) for t in tokens]
    for i, token in enumerate(tokens):
        byte = len(token) == 6 and token.startswith("<0x") and token.endswith(">")  # byte fallback's <0xAB>
        if types[i] == NORMAL and (token == unk or byte):
            types[i] = UNKNOWN if token == unk else BYTE
    normal = json.dumps(spec.get("normalizer")) + json.dumps(spec.get("pre_tokenizer"))
    prefix = '"Prepend"' in normal or '"prepend_scheme": "first"' in normal or '"prepend_scheme": "always"' in normal
    return {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.scores": scores,
            "tokenizer.ggml.token_type": types, "tokenizer.ggml.add_space_prefix": prefix}


def _steps(node) -> list[dict]:
    """The pre-tokenizer's steps, a Sequence flattened."""
    if not isinstance(node, dict):
        return []
    return [step for inner in node.get("pretokenizers", []) for step in _steps(inner)] if node.get(
        "type") == "Sequence" else [node]


def _is_byte_level(spec: dict) -> bool:
    return any(step.get("type") == "ByteLevel" for step in _steps(spec.get("pre_tokenizer")))


def _pre_name(spec: dict) -> str:
    """The ``tokenizer.ggml.pre`` name whose regexes cut words as this tokenizer.json does (a split llama.cpp
    does not name is refused: the file would tokenize otherwise there)."""
    steps = _steps(spec.get("pre_tokenizer"))
    kinds = [step.get("type") for step in steps]
    splits = tuple(step["pattern"].get("Regex") for step in steps if step.get("type") == "Split")
    regex = any(step.get("type") == "ByteLevel" and step.get("use_regex", True) for step in steps)
    if kinds == ["ByteLevel"] and regex:
        return "gpt-2"
    if kinds == ["Digits", "ByteLevel"] and steps[0].get("individual_digits") and regex:
        return "smollm"
    named = {**{patterns: name for name, patterns in reversed(PRE_TOKENIZERS.items())},  # the first name wins
             (_HF_LLAMA3,): "llama-bpe", (_HF_QWEN2,): "qwen2"}
    if kinds == ["Split"] * len(splits) + ["ByteLevel"] and not regex and splits in named:
        return named[splits]
    raise ValueError("tokenizer.json: its word split is none that aiayn names to llama.cpp (gpt-2, smollm, qwen2, "
                     "llama-bpe); a GGUF file would tokenize otherwise there")


def _config_fields(tokenizers, tok) -> dict:
    fields = {}
    for name, key in (("bos_token", "bos"), ("eos_token", "eos"), ("unk_token", "unknown"), ("pad_token", "padding")):
        text = tokenizers.special_token(name)
        if text is not None and tok.token_to_id(text) is not None:
            fields[f"tokenizer.ggml.{key}_token_id"] = tok.token_to_id(text)
    post = json.dumps(json.loads(tokenizers.src.proto).get("post_processor"))
    fields["tokenizer.ggml.add_bos_token"] = bool(tokenizers.config.get("add_bos_token", '"SpecialToken"' in post))
    fields["tokenizer.ggml.add_eos_token"] = bool(tokenizers.config.get("add_eos_token", False))
    if tokenizers.chat_template:
        fields["tokenizer.chat_template"] = tokenizers.chat_template
    return fields


def _sentencepiece_fields(sp_tokenizer) -> dict:
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(sp_tokenizer.proto)
    if proto.trainer_spec.model_type != proto.trainer_spec.BPE:
        raise ValueError("tokenizer.model: GGUF's SentencePiece tokenizer (llama) is BPE; this one is "
                         f"{proto.trainer_spec.ModelType.Name(proto.trainer_spec.model_type).lower()}")
    pieces, spec = list(proto.pieces), proto.trainer_spec
    return {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": [p.piece for p in pieces],
            "tokenizer.ggml.scores": [p.score for p in pieces],
            "tokenizer.ggml.token_type": [int(p.type) for p in pieces],  # SentencePiece's kinds are GGUF's
            "tokenizer.ggml.bos_token_id": spec.bos_id, "tokenizer.ggml.eos_token_id": spec.eos_id,
            "tokenizer.ggml.unknown_token_id": spec.unk_id, "tokenizer.ggml.padding_token_id": spec.pad_id,
            "tokenizer.ggml.add_bos_token": False,  # aiayn's language models read text without BOS
            "tokenizer.ggml.add_space_prefix": proto.normalizer_spec.add_dummy_prefix}
