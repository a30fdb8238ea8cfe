"""Speculative greedy decoding of a language model against plain greedy decoding, batch 1, on real workloads.

The same model (float32, eager: speculation verifies several tokens a pass) decodes each prompt plainly and with
each way to draft (``decoding/drafts.py``): ``ngram`` (prompt lookup) and ``int4`` / ``int8`` (the model's own
quantized copy). Workloads: ``edit`` (a source file of about 1,000 tokens returned with one change: what prompt
lookup is for), ``chat`` (ten ordinary questions, short and long answers: where a draft must not cost). Prints
JSON lines {"config", "metric", "value", "unit"}: new tokens/s plain and drafted, the speedup, the share of drafted
tokens accepted, tokens per pass of the model, and whether every text was the plain one. ``none`` drafts nothing:
the verifier's own loop (``decoding/speculative.py``) one token a pass, against the engine's plain steps, so that
what the drafting itself gains is the ratio of a draft's figure to ``none``'s.

    python benchmarks/bench_speculative_lm.py --checkpoint ~/.cache/aiayn/SmolLM2-135M-Instruct.Q4_1.gguf
                                              [--workloads edit chat] [--drafts ngram int4] [--new-tokens 256]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from common import emit

from aiayn.decoding.drafts import ModelDraft, NGramDraft
from aiayn.decoding.speculative import SpeculativeStats
from aiayn.inference.compiled import attach
from aiayn.inference.draft import load_draft
from aiayn.inference.generator import TextGenerator
from aiayn.inference.precision import Precision

EDITED = Path(__file__).resolve().parents[1] / "src" / "aiayn" / "decoding" / "drafts.py"
CHAT = ["What is the capital of France?", "Write a short poem about the sea.", "How do I boil an egg?",
        "Explain what a neural network is in three sentences.", "Give me five names for a cat.",
        "What is 12 times 7?", "Write a story about a robot who learns to paint.",
        "Why is the sky blue?", "List the planets of the solar system.", "What should I pack for a beach trip?"]


class Nothing(NGramDraft):
    """A draft that proposes nothing: every pass of the verifier makes one token."""

    def propose(self, tokens, n: int, sampler=None) -> tuple[list[int], None]:
        return [], None


def prompts(generator: TextGenerator, workload: str) -> list[list[int]]:
    """The workload's prompts, each rendered by the model's chat template (ids)."""
    if workload == "edit":
        code = EDITED.read_text()
        asks = [f"Here is a Python file:\n```python\n{code}```\nReturn the whole file, unchanged except that the "
                "class NGramDraft is renamed PromptLookup. Write only the file."]
    else:
        asks = CHAT
    return [generator.chat_ids([{"role": "user", "content": ask}]) for ask in asks]


def timed(generator: TextGenerator, ids: list[list[int]], new_tokens: int, sampling: dict
          ) -> tuple[list[str], float, int]:
    """(texts, seconds, new tokens) of decoding every prompt: greedy, or as ``sampling`` says."""
    texts, made, start = [], 0, time.perf_counter()
    for i, row in enumerate(ids):
        options = {"strategy": "sample", "seed": i, **sampling} if sampling else {"strategy": "greedy"}
        text = generator.generate(row, new_tokens, **options)[0]
        texts.append(text)
        made += len(generator.tokenizer.encode(text, add_special_tokens=False))
    return texts, time.perf_counter() - start, made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True, help="a language model: a checkpoint folder or GGUF file")
    parser.add_argument("--workloads", nargs="+", default=["edit", "chat"], choices=("edit", "chat"))
    parser.add_argument("--drafts", nargs="+", default=["none", "ngram", "int4"],
                        choices=("none", "ngram", "int4", "int8"))
    parser.add_argument("--compile-draft", action="store_true", help="the int4/int8 draft's one-token steps through "
                        "the compiled step (inference/compiled.py; compiled once, then kept)")
    parser.add_argument("--temperature", type=float, default=0.0, help="above 0: speculative sampling (with "
                        "--top-p), timed against plain sampling; the texts then differ by design")
    parser.add_argument("--top-p", type=float, default=1.0, dest="top_p")
    parser.add_argument("--new-tokens", type=int, default=256, help="at most this many new tokens a prompt (edit: "
                        "four times as many)")
    args = parser.parse_args()
    generator = TextGenerator.from_checkpoint(args.checkpoint)
    generator.generate(generator.chat_ids([{"role": "user", "content": "Hi"}]), 8, strategy="greedy")  # warm-up
    precision = Precision("cpu", few_rows=True)
    drafts = {name: Nothing() if name == "none" else load_draft(name, args.checkpoint, generator.tokenizers,
                                                                "decoder-only", precision) for name in args.drafts}
    if args.compile_draft:
        for draft in drafts.values():
            if isinstance(draft, ModelDraft):
                attach(draft.model, "on")
    sampling = {"temperature": args.temperature, "top_p": args.top_p} if args.temperature > 0 else {}
    for workload in args.workloads:
        ids, limit = prompts(generator, workload), args.new_tokens * (4 if workload == "edit" else 1)
        generator.draft = None
        plain, seconds, made = timed(generator, ids, limit, sampling)
        rate = made / seconds
        emit(f"{workload}/plain", "new_tokens_per_s", rate, "tokens/s")
        for name, draft in drafts.items():
            generator.draft, generator.speculative = draft, SpeculativeStats()
            texts, fast, made = timed(generator, ids, limit, sampling)
            config = f"{workload}/{name}"
            emit(config, "new_tokens_per_s", made / fast, "tokens/s")
            emit(config, "speedup_vs_plain", made / fast / rate, "x")  # tokens/s: sampled texts differ in length
            emit(config, "acceptance_rate", generator.speculative.acceptance_rate, "")
            emit(config, "tokens_per_pass", generator.speculative.tokens_per_main_pass, "tokens")
            emit(config, "texts_identical", texts == plain, "")


if __name__ == "__main__":
    main()
