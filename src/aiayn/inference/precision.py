"""The copy of a model that decodes: oneDNN-packed float32 or bfloat16 (CPU), weight-only int8 or int4 (CPU),
or moved to a device.

Both CPU copies first ``fuse`` the projections that read the same input (self-attention's Q, K and V; SwiGLU's
gate and up): fewer, larger matrix-vector products a decoding step. ``pack``: every ``nn.Linear`` becomes a
:class:`~aiayn.model.packed.PackedLinear` (oneDNN's kernels with weights reordered ahead of time: 2x to 2.5x
faster for decoding's small batches on some CPUs, equal to the plain model's results to rounding). ``quantize``:
every linear layer becomes an :class:`~aiayn.model.quantized.Int8Linear` or
:class:`~aiayn.model.quantized.Int4Linear` (weights in 8 or 4 bits; the output projection in 8 under int4, as
llama.cpp's files keep it), and each token table a
:class:`~aiayn.model.quantized_embedding.QuantizedEmbedding` (read from the packed output projection it is tied to, as
llama.cpp reads ``token_embd``; else in 8 bits): no float32 table is kept.
``inference_copy`` picks one of them for a product. In float32, a language model's copy (``few_rows``: one text
decoded token by token) keeps its weights dense for aiayn's own product (``aiayn::f32_mm``, where aiayn's kernels
build); otherwise it packs only where packing pays on this CPU (:func:`~aiayn.model.cpu.packing_pays`,
measured), else keeps the fused model's own layers."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import nn

from aiayn.io.checkpoint import Converter
from aiayn.model import cpu
from aiayn.model.attention import MultiHeadAttention
from aiayn.model.embeddings import TokenEmbedding
from aiayn.model.experts import MixtureOfExperts
from aiayn.model.layers import SwiGLUFeedForward
from aiayn.model.packed import PackedLinear, check_unpacked
from aiayn.model.quantized import Int4Linear, Int8Linear
from aiayn.model.quantized_embedding import QuantizedEmbedding
from aiayn.model.transformer import TransformerModel


def fuse(model: TransformerModel) -> TransformerModel:
    """Fuse, in place, each self-attention's Q, K, V projections and each SwiGLU's gate and up projections
    whose parts are plain linear layers (LoRA-wrapped ones stay apart); split each mixture's experts into linear
    layers. Returns ``model``."""
    for module in model.modules():
        layer_attn = getattr(module, "self_attn", None)
        if isinstance(layer_attn, MultiHeadAttention) and layer_attn.qkv_proj is None and all(
                type(p) is nn.Linear for p in (layer_attn.q_proj, layer_attn.k_proj, layer_attn.v_proj)):
            layer_attn.fuse()
        if isinstance(module, SwiGLUFeedForward) and module.gate_up_proj is None and all(
                type(p) is nn.Linear for p in (module.gate_proj, module.up_proj)):
            module.fuse()
        if isinstance(module, MixtureOfExperts):
            module.split()  # its experts as linear layers, which pack and quantize turn into their kernels'
    return model


def _convert(part: nn.Module, make, dtype: torch.dtype | None = None, tables: bool = False) -> nn.Module:
    """``part`` (a model, or one of its layers) made an inference copy in place: on the CPU, in eval mode, cast to
    ``dtype`` if given, fused, and each plain linear layer replaced by ``make(part)(linear)``; with ``tables``
    (quantized copies) each token table too (:func:`_quantize_tables`). Parts converted already are left as they
    are (a model whose layers were converted as they were read)."""
    part = part.cpu().eval()
    fuse(part if dtype is None else part.to(dtype))
    weights = {id(m.weight): name for name, m in part.named_modules() if type(m) is nn.Linear} if tables else {}
    _swap_linears(part, make(part))  # (``weights``: the ties, taken before the swap)
    if tables:
        _quantize_tables(part, weights)
    return part.requires_grad_(False)


def _quantize_tables(part: nn.Module, weights: dict[int, str]) -> None:
    """Each token table of ``part`` (an input width that is a multiple of 32) made a
    :class:`~aiayn.model.quantized_embedding.QuantizedEmbedding`: read from the packed output projection it is tied to
    (``weights``: id of each linear layer's weight before quantizing -> its name), else quantized alone (Q8_0)."""
    made: dict[int, QuantizedEmbedding] = {}  # a table two embeddings share (source and target) made once
    tables = [(n, m) for n, m in part.named_modules(remove_duplicate=False) if type(m) is TokenEmbedding]
    for name, table in tables:
        if table.embedding_dim % 32:
            continue
        if id(table) not in made:
            tied = weights.get(id(table.weight))
            made[id(table)] = QuantizedEmbedding(table, part.get_submodule(tied) if tied else None)
        parent, _, attr = name.rpartition(".")
        setattr(part.get_submodule(parent) if parent else part, attr, made[id(table)])


def _owned(model: TransformerModel, what: str, own: bool) -> TransformerModel:
    """``model`` itself (``own``: the caller hands it over: no second copy of the weights) or a copy of it."""
    check_unpacked(model, what)
    return model if own else copy.deepcopy(model)


def _quantized(bits: int):
    """What ``quantize`` makes of a linear layer: int4 (an input width that is a multiple of 32), else int8; the
    output projection int8 under int4 too, as llama.cpp keeps ``output.weight`` (or a tied ``token_embd``) in 8
    bits or more: in 4 bits SmolLM2's chat answer to "What is the capital of France?" was no longer Paris."""
    def make(part: nn.Module):
        output = getattr(part, "output", None)
        return lambda lin: (Int4Linear(lin) if bits == 4 and lin.in_features % 32 == 0 and lin is not output
                            else Int8Linear(lin))
    return make


def _packed(dense: bool = False):
    """What ``pack`` makes of a linear layer: a PackedLinear (the output projection keeps its weight: tied), its
    float32 weight kept ``dense`` for aiayn::f32_mm where asked and the kernels build."""
    def make(part: nn.Module):
        output = getattr(part, "output", None)
        return lambda lin: PackedLinear(lin, keep_weight=lin is output,
                                        dense=dense and lin.weight.dtype == torch.float32)
    return make


def _plain(part: nn.Module):
    """A float32 copy whose linear layers stay as they are (fused only): where packing does not pay."""
    return lambda lin: lin


def _linears(model: nn.Module) -> list[str]:
    """The names of the plain ``nn.Linear`` layers an inference copy converts: every one but a mixture's router,
    whose scores choose the experts and stay as they were trained (as llama.cpp keeps ffn_gate_inp)."""
    routers = {id(m.router) for m in model.modules() if isinstance(m, MixtureOfExperts)}
    return [name for name, m in model.named_modules() if type(m) is nn.Linear and id(m) not in routers]


def _swap_linears(model: nn.Module, make) -> None:
    """Replace each of ``model``'s converted linear layers (:func:`_linears`) by ``make(linear)``."""
    for name in _linears(model):
        parent, _, attr = name.rpartition(".")
        owner = model.get_submodule(parent) if parent else model
        setattr(owner, attr, make(getattr(owner, attr)))


def quantize(model: TransformerModel, bits: int = 8, dtype: torch.dtype | None = None,
             own: bool = False) -> TransformerModel:
    """A weight-only int8 (``bits`` 8) or int4 (``bits`` 4, groups of 32) copy of ``model`` for CPU inference, in
    eval mode, its other parts in ``dtype`` (default the model's); ``generate`` and ``Translator`` take it.

    int4 needs every layer's input width a multiple of 32 (a layer that is not stays int8; so does the output
    projection, as llama.cpp keeps it). int8's activations are
    bfloat16 where the CPU computes in it and int8 elsewhere (:class:`~aiayn.model.quantized.Int8Linear`)."""
    if bits not in (4, 8):
        raise ValueError(f"quantize: bits {bits}; choose 8 or 4")
    return _convert(_owned(model, "quantize", own), _quantized(bits), dtype, tables=True)


def pack(model: TransformerModel, dtype: torch.dtype | None = None, own: bool = False) -> TransformerModel:
    """An inference copy of ``model`` on the CPU (optionally cast to ``dtype``, e.g. torch.bfloat16) whose
    linear layers are :class:`PackedLinear`; ``generate`` and ``Translator`` take it, training cannot. ``own``:
    packed in place (the caller gives its model up)."""
    if not cpu.packing_available():
        raise RuntimeError("pack: this PyTorch build has no oneDNN (mkldnn); use the model as it is")
    if not cpu.packing_available(dtype):
        raise RuntimeError("pack: this CPU has no oneDNN bfloat16 kernels (AVX512 or AVX-NE-CONVERT); pack in "
                           "float32, or decode the plain model in bfloat16 (inference_copy does)")
    return _convert(_owned(model, "pack", own), _packed(), dtype)


@dataclass(frozen=True)
class Precision:
    """How a product's model computes, decided once from its flags (``--int8``, ``--int4``, ``--bf16``, the device;
    ``packed``: oneDNN's packing on the CPU; ``few_rows``: one text decoded token by token, a language model's).
    The copy it makes records it (``model.runtime.precision``): a model made for it, layer by layer as its weights
    were read (:meth:`converter`, ``inference.load.load_for_use``) or whole (:meth:`apply`), is used as it is by the
    product, never converted a second time."""

    device: str = "cpu"
    int8: bool = False
    bf16: bool = False
    packed: bool = True
    int4: bool = False
    few_rows: bool = False

    def __post_init__(self) -> None:
        if self.int8 and self.int4:
            raise ValueError("--int8 and --int4: choose one")
        object.__setattr__(self, "device", str(torch.device(self.device)))  # "cpu" and torch.device("cpu") alike

    def converter(self) -> Converter | None:
        """What :meth:`apply` does on the CPU, as a conversion of one part of a model in place: for
        ``load_model(..., convert=)``, which converts each layer as soon as its weights are read, so that the float32
        weights are never all held beside the converted ones. None where the copy is not made part by part (a GPU,
        or nothing to convert). ``few_rows``: in float32 the weights stay dense for aiayn::f32_mm where the kernels
        build; else (a translator's batches and beams, an encoder's) oneDNN's packing, faster for many rows (1.7x at
        a translator's greedy batch of 16, docs/decoding.md)."""
        dtype = torch.bfloat16 if self.bf16 else None
        if torch.device(self.device).type != "cpu":
            return None
        if self.int8 or self.int4:  # its layers and tables quantize a block of rows at a time, as load_weights reads
            bits = 8 if self.int8 else 4
            return Converter(self._recorded(lambda part: _convert(part, _quantized(bits), dtype, tables=True)),
                             reads_rows=True, dtype=dtype)
        dense = self.few_rows and dtype is None and cpu.dense_available()
        if self.packed and cpu.packing_available(dtype) and (dtype is not None or dense or cpu.packing_pays()):
            return Converter(self._recorded(lambda part: _convert(part, _packed(dense), dtype)), dtype=dtype)
        if self.packed and dtype is None:  # float32 where packing does not pay: fused, PyTorch's own matmul
            return Converter(self._recorded(lambda part: _convert(part, _plain)))
        return None

    def _recorded(self, convert):
        """``convert``, the whole model's conversion (the last part) recording this precision on it."""
        def made(part: nn.Module) -> nn.Module:
            part = convert(part)
            if isinstance(part, TransformerModel):
                part.runtime.precision = self
            return part
        return made

    def apply(self, model: TransformerModel, own: bool = False) -> TransformerModel:
        """The model as it will decode: weight-only int8 or int4 (CPU; with ``bf16`` the rest in bfloat16),
        oneDNN-packed (CPU, float32 or bfloat16), or moved (and cast to bfloat16 in a copy: the caller's model keeps
        its dtype). ``own``: the caller hands ``model`` over (a product that loaded it, a server): it becomes the
        copy in place, so the weights are held once; one made for this precision already is used as it is."""
        if own and model.runtime.precision == self:
            return model
        quantized = self.int8 or self.int4
        if model.runtime.world > 1:  # split over processes (inference/tensor_parallel.py): as it is
            if quantized or self.bf16:
                raise ValueError("--tensor-parallel decodes the float32 weights it split; leave out --int8, --int4, "
                                 "--bf16")
            return model.eval()
        if quantized and torch.device(self.device).type != "cpu":
            raise ValueError(f"--int{8 if self.int8 else 4}: the weight-only kernels run on the CPU only; use "
                             "--device cpu")
        if (convert := self.converter()) is not None:  # quantized or packed, on the CPU (the record set)
            return convert(_owned(model, "quantize" if quantized else "pack", own))
        model = model if own or not self.bf16 else copy.deepcopy(model)
        model = model.eval().to(self.device, torch.bfloat16 if self.bf16 else None)
        model.runtime.precision = self
        return model


def inference_copy(model: TransformerModel, device: torch.device | str = "cpu", int8: bool = False,
                   bf16: bool = False, packed: bool = True, int4: bool = False, own: bool = False,
                   few_rows: bool = False) -> TransformerModel:
    """:meth:`Precision.apply` of these flags: the model as it will decode (``own``: made in place)."""
    return Precision(str(device), int8, bf16, packed, int4, few_rows).apply(model, own)


def converter(device: torch.device | str = "cpu", int8: bool = False, bf16: bool = False, packed: bool = True,
              int4: bool = False, few_rows: bool = False) -> Converter | None:
    """:meth:`Precision.converter` of these flags: the copy made part by part as the weights are read."""
    return Precision(str(device), int8, bf16, packed, int4, few_rows).converter()


def weight_count(model: nn.Module) -> int:
    """How many weights ``model`` holds, each counted once: its parameters and its converted linear layers' weights
    and biases (int8, int4, packed or dense float: no parameters; a dense layer's weight counted once where it is a
    parameter too, a tied token table)."""
    params = list(model.parameters())
    held = {p.data_ptr() for p in params}
    converted = [m for m in model.modules() if isinstance(m, Int8Linear | Int4Linear | PackedLinear)
                 and (getattr(m, "weight", None) is None or m.weight.data_ptr() not in held)]
    layers = [m.in_features * m.out_features + (0 if m.bias is None else m.bias.numel()) for m in converted]
    return sum(p.numel() for p in params) + sum(layers)


def kernels(model: nn.Module) -> dict[str, int]:
    """What the model's linear layers (and a quantized copy's token tables) compute, in words (each kind's
    ``kernel``; plain ``nn.Linear``: PyTorch's matmul in its dtype), and how many layers run each: the path the
    precision flags chose on this CPU."""
    counts: dict[str, int] = {}
    for module in model.modules():
        if isinstance(module, PackedLinear | Int8Linear | Int4Linear | QuantizedEmbedding):
            path = module.kernel
        elif isinstance(module, nn.Linear):
            path = f"{str(module.weight.dtype).removeprefix('torch.')} weights, PyTorch's matmul"
        else:
            continue
        counts[path] = counts.get(path, 0) + 1
    return counts
