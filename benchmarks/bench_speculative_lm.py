"""Speculative greedy decoding of a language model against plain greedy decoding, batch 1, on real workloads.

The same model (float32; eager, or with ``--compile`` its one-token steps and its verifying passes of several
tokens through the compiled step) decodes each prompt plainly and with
each way to draft (``decoding/drafts.py``): ``ngram`` (prompt lookup) and ``int4`` / ``int8`` (the model's own
quantized copy). Workloads: ``edit`` (a source file of about 1,000 tokens returned with one change: what prompt
lookup is for), ``chat`` (ten ordinary questions, short and long answers: where a draft must not cost). Prints
JSON lines {"config", "metric", "value", "unit"}: new tokens/s plain and drafted, the speedup, the share of drafted
tokens accepted, tokens per pass of the model, and whether every text was the plain one. ``none`` drafts nothing:
the verifier's own loop (``decoding/speculative.py``) one token a pass, against the engine's plain steps, so that
what the drafting itself gains is the ratio of a draft's figure to ``none``'s.

``--llama-cpp`` runs the anchor on the same float32 weights (exported as an F32 GGUF file with ``aiayn export``):
llama-cpp-python plain and with its prompt lookup (``LlamaPromptLookupDecoding``, 10 tokens a guess, its default),
the same prompt ids, greedy, the same limit; ``{workload}/llama.cpp-plain`` and ``llama.cpp-lookup`` figures, and
each aiayn draft's tokens/s against llama.cpp's prompt lookup (``vs_llama_cpp_lookup``).

    python benchmarks/bench_speculative_lm.py --checkpoint ~/.cache/aiayn/SmolLM2-135M-Instruct.Q4_1.gguf
                                              [--workloads edit chat] [--drafts ngram int4] [--new-tokens 256]
                                              [--llama-cpp] [--compile] [--compile-draft]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from common import emit
from engines_lm import aiayn

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
    """The workload's prompts, each rendered by the model's chat template (ids); a model without one (a base model,
    as the Gemma 3 270M GGUF file is) takes each as text, the edit's ending where the file is to begin."""
    if workload == "edit":
        code = EDITED.read_text()
        asks = [f"Here is a Python file:\n```python\n{code}```\nReturn the whole file, unchanged except that the "
                "class NGramDraft is renamed PromptLookup. Write only the file."]
    else:
        asks = CHAT
    if generator.chat_template is None:
        opened = "\n```python\n" if workload == "edit" else "\n"
        return [generator.tokenizer.encode(ask + opened) for ask in asks]
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


def llama_cpp_runs(checkpoint: str, work: Path, end_ids: tuple[int, ...]) -> dict:
    """llama-cpp-python on ``checkpoint``'s float32 weights: {"plain" | "lookup": run(ids, limit) -> new ids}."""
    from llama_cpp import Llama
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    aiayn("import", checkpoint, "--output", str(work / "aiayn"))
    aiayn("export", "--checkpoint", str(work / "aiayn"), "--format", "gguf", "--quantization", "f32",
          "--output", str(work / "f32.gguf"))

    def runner(draft) -> callable:
        llm = Llama(model_path=str(work / "f32.gguf"), n_ctx=4096, n_batch=512, n_threads=2, verbose=False,
                    draft_model=draft, logits_all=draft is not None)  # (its draft needs every row's logits)

        def run(ids: list[int], limit: int) -> list[int]:
            out = []
            for token in llm.generate(ids, temp=0.0, top_k=1, top_p=1.0, repeat_penalty=1.0, reset=True):
                if token in end_ids:
                    break
                out.append(token)
                if len(out) == limit:
                    break
            return out
        return run
    return {"plain": runner(None), "lookup": runner(LlamaPromptLookupDecoding(num_pred_tokens=10))}


def llama_cpp_timed(run, ids: list[list[int]], limit: int) -> tuple[list[list[int]], float, int]:
    """(new ids per prompt, seconds, new tokens) of llama.cpp's greedy decoding of every prompt."""
    start = time.perf_counter()
    outs = [run(row, limit) for row in ids]
    return outs, time.perf_counter() - start, sum(map(len, outs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True, help="a language model: a checkpoint folder or GGUF file")
    parser.add_argument("--workloads", nargs="+", default=["edit", "chat"], choices=("edit", "chat"))
    parser.add_argument("--drafts", nargs="+", default=["none", "ngram", "int4"],
                        choices=("none", "ngram", "int4", "int8"))
    parser.add_argument("--compile-draft", action="store_true", help="the int4/int8 draft's one-token steps through "
                        "the compiled step (inference/compiled.py; compiled once, then kept)")
    parser.add_argument("--compile", action="store_true", help="the model's own steps compiled too: plain decoding's "
                        "one-token steps and, with a draft, its verifying passes (a graph of several tokens); each "
                        "draft then runs again verifying eagerly (verify_compiled_vs_eager)")
    parser.add_argument("--temperature", type=float, default=0.0, help="above 0: speculative sampling (with "
                        "--top-p), timed against plain sampling; the texts then differ by design")
    parser.add_argument("--top-p", type=float, default=1.0, dest="top_p")
    parser.add_argument("--llama-cpp", action="store_true", help="llama-cpp-python plain and with its prompt lookup "
                        "on the same float32 weights (pip install llama-cpp-python)")
    parser.add_argument("--new-tokens", type=int, default=256, help="at most this many new tokens a prompt (edit: "
                        "four times as many)")
    args = parser.parse_args()
    generator = TextGenerator.from_checkpoint(args.checkpoint)
    generator.generate(prompts(generator, "chat")[0], 8, strategy="greedy")  # warm-up
    precision = Precision("cpu", few_rows=True)
    drafts = {name: Nothing() if name == "none" else load_draft(name, args.checkpoint, generator.tokenizers,
                                                                "decoder-only", precision) for name in args.drafts}
    if args.compile:
        attach(generator.model, "on", columns=True)
    if args.compile_draft:
        for draft in drafts.values():
            if isinstance(draft, ModelDraft):
                attach(draft.model, "on")
    sampling = {"temperature": args.temperature, "top_p": args.top_p} if args.temperature > 0 else {}
    work = tempfile.TemporaryDirectory()
    anchors = llama_cpp_runs(args.checkpoint, Path(work.name), generator.model.config.end_ids) if args.llama_cpp \
        else {}
    for workload in args.workloads:
        ids, limit = prompts(generator, workload), args.new_tokens * (4 if workload == "edit" else 1)
        generator.draft = None
        plain, seconds, made = timed(generator, ids, limit, sampling)
        rate = made / seconds
        emit(f"{workload}/plain", "new_tokens_per_s", rate, "tokens/s")
        lookup = None
        for name, run in anchors.items():
            outs, seconds, made = llama_cpp_timed(run, ids, limit)
            emit(f"{workload}/llama.cpp-{name}", "new_tokens_per_s", made / seconds, "tokens/s")
            emit(f"{workload}/llama.cpp-{name}", "texts_as_aiayn_plain",
                 sum(generator.tokenizer.decode(o) == t for o, t in zip(outs, plain, strict=True)), f"of {len(ids)}")
            lookup = made / seconds if name == "lookup" else lookup
        for name, draft in drafts.items():
            generator.draft, generator.speculative = draft, SpeculativeStats()
            texts, fast, made = timed(generator, ids, limit, sampling)
            config = f"{workload}/{name}"
            emit(config, "new_tokens_per_s", made / fast, "tokens/s")
            emit(config, "speedup_vs_plain", made / fast / rate, "x")  # tokens/s: sampled texts differ in length
            emit(config, "acceptance_rate", generator.speculative.acceptance_rate, "")
            emit(config, "tokens_per_pass", generator.speculative.tokens_per_main_pass, "tokens")
            emit(config, "texts_identical", texts == plain, "")
            if lookup is not None:
                emit(config, "vs_llama_cpp_lookup", made / fast / lookup, "x")
            if args.compile and generator.model.runtime.static is not None:  # the same, verifying eagerly
                static, kinds = generator.model.runtime.static, generator.model.runtime.static.kinds
                static.kinds = ("row",)  # the graph of several tokens left out: each verifying pass eager
                _, eager, eager_made = timed(generator, ids, limit, sampling)
                static.kinds = kinds
                emit(f"{config}/verify-eager", "new_tokens_per_s", eager_made / eager, "tokens/s")
                emit(config, "verify_compiled_vs_eager", made / fast / (eager_made / eager), "x")


if __name__ == "__main__":
    main()
