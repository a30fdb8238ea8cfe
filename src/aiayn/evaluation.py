"""Corpus-level sacreBLEU and chrF of translations against references."""

from __future__ import annotations

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


def score(hypotheses: list[str], references: list[str], tokenize: str | None = None) -> Scores:
    """sacreBLEU (13a by default, cased, detokenised text) and chrF; ``tokenize`` e.g. "zh"."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    bleu = BLEU(tokenize=tokenize) if tokenize else BLEU()
    chrf = CHRF()
    b = bleu.corpus_score(hypotheses, [references])
    c = chrf.corpus_score(hypotheses, [references])
    return Scores(b.score, c.score, str(bleu.get_signature()), str(chrf.get_signature()))
