"""How a compiled step's graph is made (``compiled.py``): the sizes it takes as they come (:func:`mark_dynamic`), and
the graph that holds its weights (:class:`Frozen`), for a model whose layers Inductor lowers only so."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor
from torch._inductor import config as inductor_config

from aiayn.model.packed import PackedLinear


def frozen(model) -> bool:
    """Whether ``model``'s compiled step must hold its weights (Inductor's ``freezing``, not kept on disk): some of
    its layers are oneDNN-packed (a bfloat16 model, or float32 where aiayn's kernels do not build)."""
    return any(isinstance(m, PackedLinear) and not m.dense for m in model.modules())


def mark_dynamic(args: tuple, kind: str) -> None:
    """The caches' capacity and the slots a full layer attends marked dynamic (one graph for every capacity and
    span) and, for ``rows``, the batch size, for ``columns`` the new tokens' count (``compiled.KINDS``)."""
    tokens, _, left_pad, kv, _, span = args
    for t in kv:
        torch._dynamo.maybe_mark_dynamic(t, 2)
    if span is not None:
        torch._dynamo.maybe_mark_dynamic(span, 0)
    for t in [tokens, left_pad, *kv] if kind == "rows" else []:
        torch._dynamo.maybe_mark_dynamic(t, 0)
    if kind == "columns":
        torch._dynamo.maybe_mark_dynamic(tokens, 1)


class Frozen:
    """A ``torch.compile``d step whose graph holds the weights (Inductor's ``freezing``): after the first call only
    the guards that tell graphs apart are checked; inputs no graph was made for (inference-mode tensors) compile
    one more graph."""

    def __init__(self, step: Callable, kind: str) -> None:
        self.fn = torch.compile(step, fullgraph=True, dynamic=False, options={"cpp_wrapper": True})
        self.kind, self.warm = kind, False

    def __call__(self, *args) -> Tensor:
        if not self.warm:
            logits, self.warm = self._compiling(args), True
            return logits
        try:
            with torch.compiler.set_stance(skip_guard_eval_unsafe=True):
                return self.fn(*args)
        except RuntimeError as error:
            if "skip_guard_eval_unsafe" not in str(error):
                raise
            return self._compiling(args)

    def _compiling(self, args: tuple) -> Tensor:
        """A call that may compile, every guard checked, freezing on (read when compiling, not from options)."""
        mark_dynamic(args, self.kind)
        with inductor_config.patch(freezing=True):
            return self.fn(*args)
