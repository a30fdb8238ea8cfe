"""Fine-tuning from a checkpoint (fairseq's ``--restore-file --reset-optimizer``, OpenNMT's ``-train_from``): the
model, its weights and its tokenizer come from the checkpoint, the optimizer starts fresh; what the recipe may
not change is refused by name; parts of the model can be frozen."""

from __future__ import annotations

import re
import sys

from torch import nn

from aiayn.inference.load import load_checkpoint
from aiayn.interop.peft import load_adapter
from aiayn.io.run import RunFolder
from aiayn.model.lora import apply_lora
from aiayn.model.transformer import TransformerModel
from aiayn.tokenizers import TokenizerPair

ARCH_OF_TASK = {"translation": "encoder-decoder", "cmlm": "encoder-decoder", "ctc": "encoder-decoder",
                "lm": "decoder-only", "mlm": "encoder-only", "chat": "decoder-only"}
# Recipe fields that build a model or a tokenizer: with init_from, the checkpoint's are used, so a value other
# than the default contradicts it (the field's default -> what it means).
BUILDING_FIELDS = {"preset": "small", "vocab_size": 8000, "tokenizer_type": "bpe", "joint_vocab": True,
                   "tokenizer": None}


def start(cfg, run: RunFolder, splits, resume: bool, main: bool) -> tuple[TransformerModel, TokenizerPair]:
    """The model a run with ``init_from`` trains and its tokenizers. A fresh run: the checkpoint's model
    (with LoRA adapters on it for ``lora_r``), checked against the recipe, its tokenizer written to
    RUN/tokenizer/ (by the ``main`` process) as a trained one is. ``resume`` (a LoRA run: a full fine-tuning
    run resumes from its own last/ like any run): the base with the adapter of the run's last/."""
    if resume:
        return load_checkpoint(cfg.init_from, prepare=lambda model: _adapter_of(model, run.last))
    model, tokenizers = load_checkpoint(cfg.init_from)
    check_recipe(cfg, model)
    if main:
        run.tokenizer.mkdir(parents=True, exist_ok=True)
        tokenizers.save(run.tokenizer)
        unk = model.config.unk_id
        if unk not in (model.config.pad_id, model.config.bos_id):  # a byte-level vocabulary has no unknown
            warn_unknown(splits.train.sources, tokenizers.src, unk, cfg.init_from)
    if cfg.lora_r:
        apply_lora(model, cfg.lora_r, cfg.lora_alpha, cfg.lora_targets, cfg.lora_dropout)
    return model, tokenizers


def _adapter_of(model: TransformerModel, folder) -> None:
    """Put a LoRA run's adapter on its base model, everything else frozen as training left it."""
    for param in model.parameters():
        param.requires_grad_(False)
    load_adapter(model, folder)


def adapter_options(cfg) -> dict:
    """How a LoRA run's checkpoints are written (``training.state.save_checkpoint``): the adapter alone,
    naming its base; {} for any other run."""
    return {"adapter_of": str(cfg.init_from)} if cfg.lora_r else {}


def check_recipe(cfg, model: TransformerModel) -> None:
    """Refuse, by field, what a recipe says that contradicts the checkpoint it starts from."""
    contradicting = [name for name, default in BUILDING_FIELDS.items() if getattr(cfg, name) != default]
    if cfg.model:
        contradicting.append("model (" + ", ".join(sorted(cfg.model)) + ")")
    if contradicting:
        raise ValueError(f"init_from: the architecture and tokenizer come from {cfg.init_from}; drop "
                         f"{', '.join(contradicting)}")
    if ARCH_OF_TASK[cfg.task] != model.config.arch:
        raise ValueError(f"task: {cfg.task} needs an {ARCH_OF_TASK[cfg.task]} checkpoint; {cfg.init_from} is "
                         f"{model.config.arch}")


def freeze(model: nn.Module, spec: str | None) -> list[str]:
    """Stop the gradients of the parts ``spec`` names (comma-separated: embeddings, encoder, decoder,
    layers:A-B for layers A..B of every stack, output_bias: the output projection's bias, which Hugging Face's
    Marian keeps fixed as its ``final_logits_bias`` buffer); returns the frozen parameter names. A part the
    model does not have is a ValueError naming it."""
    if not spec:
        return []
    names = [name for name, _ in model.named_parameters()]
    frozen: set[str] = set()
    for part in (p.strip() for p in spec.split(",")):
        hits = [n for n in names if _matches(part, n)]
        if not hits:
            raise ValueError(f"freeze: the model has no {part!r}; name embeddings, encoder, decoder, output_bias "
                             "or layers:A-B (0-based, inclusive)")
        frozen.update(hits)
    for name, param in model.named_parameters():
        if name in frozen:
            param.requires_grad_(False)
    return sorted(frozen)


def _matches(part: str, name: str) -> bool:
    if part == "embeddings":
        return ".tokens." in name or ".positions." in name or name.startswith(("embed.", "src_embed.", "tgt_embed."))
    if part in ("encoder", "decoder"):
        return name.startswith(part + ".")
    if part == "output_bias":
        return name == "output.bias"
    span = re.fullmatch(r"layers:(\d+)-(\d+)", part) or re.fullmatch(r"layers:(\d+)()", part)
    if span is None:
        raise ValueError(f"freeze: unknown part {part!r}; name embeddings, encoder, decoder, output_bias or "
                         "layers:A-B")
    first = int(span.group(1))
    last = int(span.group(2) or first)
    layer = re.match(r"(?:encoder|decoder)\.layers\.(\d+)\.", name)
    return layer is not None and first <= int(layer.group(1)) <= last


def warn_unknown(texts: list[str], tokenizer, unk_id: int, source: str, limit: float = 0.05) -> float:
    """The share of ``texts``' tokens the tokenizer maps to ``unk_id``; above ``limit`` a warning names it."""
    ids = [i for text in texts[:2000] for i in tokenizer.encode(text)]
    share = sum(i == unk_id for i in ids) / max(len(ids), 1)
    if share > limit:
        print(f"aiayn: warning: {share:.1%} of the training tokens are unknown to the tokenizer of {source}; "
              "its vocabulary does not cover this text", file=sys.stderr)
    return share
