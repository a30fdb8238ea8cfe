"""aiayn: the Transformer of *Attention Is All You Need*, as readable, tested software."""

from aiayn.config import ModelConfig
from aiayn.decoding import generate
from aiayn.models import DecoderOnly, EncoderDecoder, EncoderOnly, TransformerModel, build_model
from aiayn.packing import pack
from aiayn.params import count_parameters
from aiayn.quantize import quantize

__all__ = [
    "DecoderOnly",
    "EncoderDecoder",
    "EncoderOnly",
    "ModelConfig",
    "TransformerModel",
    "build_model",
    "count_parameters",
    "generate",
    "pack",
    "quantize",
]
__version__ = "0.1.0"
