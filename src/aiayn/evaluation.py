"""Corpus-level sacreBLEU and chrF of translations against references."""

from __future__ import annotations

import re
from dataclasses import dataclass

from sacrebleu.metrics import BLEU, CHRF


@dataclass(frozen=True)
class Scores:
    bleu: float
    chrf: float
    bleu_signature: str
    chrf_signature: str

    def to_dict(self) -> dict:
        return {"bleu": round(self.bleu, 2), "chrf": round(self.chrf, 2),
                "bleu_signature": self.bleu_signature, "chrf_signature": self.chrf_signature}


def score(hypotheses: list[str], references: list[str], tokenize: str | None = None,
          lowercase: bool = False) -> Scores:
    """sacreBLEU (13a by default, cased, detokenised text) and chrF; ``tokenize`` e.g. "zh"; ``lowercase``:
    both case-insensitive (the signatures say ``case:lc``)."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    bleu = BLEU(tokenize=tokenize, lowercase=lowercase) if tokenize else BLEU(lowercase=lowercase)
    chrf = CHRF(lowercase=lowercase)
    b = bleu.corpus_score(hypotheses, [references])
    c = chrf.corpus_score(hypotheses, [references])
    return Scores(b.score, c.score, str(bleu.get_signature()), str(chrf.get_signature()))


def tokenized_bleu(hypotheses: list[str], references: list[str], lang: str, lowercase: bool = False) -> float:
    """BLEU as the paper reports it (tensor2tensor's ``get_ende_bleu.sh``): both sides Moses-tokenized
    (sacremoses), hyphenated compounds split (``a-b`` -> ``a ##AT##-##AT## b``), then BLEU on those tokens
    (multi-bleu.perl's count; here sacreBLEU with ``tokenize='none'``). Not comparable across tokenizers:
    report sacreBLEU next to it. ``lowercase``: case-insensitive, as many Multi30k papers score."""
    try:
        from sacremoses import MosesTokenizer
    except ImportError:
        raise ValueError("--tokenized-bleu: needs sacremoses; pip install 'aiayn[wmt]'") from None
    moses = MosesTokenizer(lang=lang)

    def tokenize(line: str) -> str:
        return re.sub(r"(\S)-(\S)", r"\1 ##AT##-##AT## \2", moses.tokenize(line, return_str=True))

    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    bleu = BLEU(tokenize="none", lowercase=lowercase, force=True)
    return bleu.corpus_score([tokenize(h) for h in hypotheses], [[tokenize(r) for r in references]]).score
