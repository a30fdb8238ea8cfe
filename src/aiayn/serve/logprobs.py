"""OpenAI's two layouts of tokens' log-probabilities: the legacy completions' parallel lists (with a prompt's
scored tokens in front, for ``echo``) and the chat's one object per token."""

from __future__ import annotations

from aiayn.inference.generator import TextGenerator

FLOOR = -9999.0  # a token a grammar forbids has log-probability -inf, which JSON cannot hold: OpenAI's floor


def finite(logprob: float | None) -> float | None:
    """A log-probability JSON can hold (-inf: ``FLOOR``)."""
    return logprob if logprob is None or logprob > FLOOR else FLOOR


def completion_logprobs(tokens: list[dict], generator: TextGenerator) -> dict:
    """The legacy completions layout: parallel lists, one entry per token."""
    decode = generator.tokenizer.decode
    offsets, at = [], 0
    for t in tokens:
        offsets.append(at)
        at += len(t["text"])
    return {"tokens": [t["text"] for t in tokens], "token_logprobs": [finite(t["logprob"]) for t in tokens],
            "top_logprobs": [{decode([i]): finite(lp) for i, lp in t["top"]} for t in tokens], "text_offset": offsets}


def echoed(ids: list[int], scored: list, generated: dict | None, generator: TextGenerator) -> dict:
    """The completions layout of a prompt's scored tokens followed by the generated ones (``generated``)."""
    decode = generator.tokenizer.decode
    prompt = [{"text": decode([i]), "logprob": lp, "top": top} for i, (lp, top) in zip(ids, scored, strict=True)]
    out = completion_logprobs(prompt, generator)
    out["top_logprobs"][0] = None  # the first token has no context
    if generated:
        shift = sum(len(t["text"]) for t in prompt)
        out = {"tokens": out["tokens"] + generated["tokens"],
               "token_logprobs": out["token_logprobs"] + generated["token_logprobs"],
               "top_logprobs": out["top_logprobs"] + generated["top_logprobs"],
               "text_offset": out["text_offset"] + [shift + o for o in generated["text_offset"]]}
    return out


def chat_logprobs(tokens: list[dict], generator: TextGenerator) -> dict:
    """The chat layout: one object per token, with its bytes and its alternatives."""
    decode = generator.tokenizer.decode

    def entry(text: str, logprob: float) -> dict:
        return {"token": text, "logprob": finite(logprob), "bytes": list(text.encode("utf-8"))}

    return {"content": [{**entry(t["text"], t["logprob"]),
                         "top_logprobs": [entry(decode([i]), lp) for i, lp in t["top"]]} for t in tokens]}
