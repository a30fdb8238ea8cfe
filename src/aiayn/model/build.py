"""Build or load whichever family member a config names (the Annotated Transformer's ``make_model``): the arch
picks the member, and an encoder-decoder's ``kind`` picks how its decoder fills the target."""

from __future__ import annotations

from pathlib import Path

from aiayn.model.config import ModelConfig
from aiayn.model.decoder_only import DecoderOnly
from aiayn.model.nonautoregressive import CMLM, CTC
from aiayn.model.transformer import EncoderDecoder, EncoderOnly, TransformerModel

MEMBERS = {("encoder-decoder", "autoregressive"): EncoderDecoder, ("encoder-decoder", "cmlm"): CMLM,
           ("encoder-decoder", "ctc"): CTC, ("decoder-only", "autoregressive"): DecoderOnly,
           ("encoder-only", "autoregressive"): EncoderOnly}


def build_model(config: ModelConfig) -> TransformerModel:
    """The member ``config.arch`` and ``config.kind`` name (a ``CMLM`` for kind cmlm, a ``CTC`` for ctc), freshly
    initialised."""
    return MEMBERS[config.arch, config.kind](config)


def load_model(folder: str | Path, member: type[TransformerModel] | None = None, convert=None,
               verify: bool = True) -> TransformerModel:
    """The model of a checkpoint folder, whichever member it holds (``TransformerModel.load``: its checksums
    checked unless ``verify`` is False, no pickle, in eval mode); ``member``: the class it must be instead (another
    member's config is a ValueError naming the field); ``convert``: made an inference copy layer by layer as it is
    read."""
    return TransformerModel.load(folder, member or build_model, convert, verify)
