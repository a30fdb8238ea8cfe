"""What one client may ask of the server (no web imports: ``aiayn serve``'s flags are made from it)."""

from __future__ import annotations

from dataclasses import dataclass, field


def _limit(default: float, help: str):
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class Limits:
    """Caps on what one request may ask: a size over one (texts, characters, body bytes) is 413 on every route
    (:meth:`oversize`); a length over the context or a decoding limit is the scheduler's ``too_long`` refusal (422 on
    the native routes, 400 ``context_length_exceeded`` on ``/v1``, each protocol's code); too many open requests 429."""

    max_chars: int = _limit(1000, "characters per text (translation, encoders; a language model's prompts are "
                                  "limited in tokens: --max-model-len)")
    max_texts: int = _limit(64, "texts per /translate request")
    max_new_tokens: int = _limit(256, "longest translation or continuation a request may ask for")
    max_beam_size: int = _limit(16, "beam size (and sequences returned) a request may ask for")
    max_body_bytes: int = _limit(1_000_000, "largest request body")
    max_attention_tokens: int = _limit(128, "tokens per side for /attention (its answer grows with the square)")
    max_context: int = _limit(1024, "prompt + continuation tokens for /generate (models without a learned "
                                    "position table)")
    max_model_len: int = _limit(0, "a language model's context in tokens, prompt and continuation: 0, the model's "
                                   "own (its max_len, or --max-context if larger); a longer prompt is refused naming "
                                   "this flag")
    prefix_cache_bytes: int = _limit(-1, "memory for the keys/values of prompt blocks kept across requests (least "
                                         "recently used evicted), a translator's of sources seen before: -1, sized "
                                         "for the model (four whole contexts, at most an eighth of the machine's "
                                         "memory; a translator's 256 MiB); 0, none")
    prefill_chunk: int = _limit(8, "prompt tokens computed in each decoding step's pass while a long prompt joins "
                                    "running generations, so they keep their pace: this many at the prompt's start "
                                    "until --prefill-budget has step times to go by, then that budget's; fewer "
                                    "further on, where each token also attends to every earlier one (0: a prompt "
                                    "at once)")
    prefill_budget: float = _limit(2.0, "how long a decoding step carrying a long prompt's chunk may take, as a "
                                        "multiple of the running generations' step alone: chunks sized to it from "
                                        "measured step times (0: --prefill-chunk tokens, whatever they cost)")
    long_prefill_token_threshold: int = _limit(128, "prompts with more tokens than this to compute (past the prompt "
                                                    "cache) are long: computed --prefill-chunk tokens a step; shorter "
                                                    "ones at once")
    read_timeout_s: float = _limit(10.0, "seconds a client has to send its headers, and then its body")
    max_connections: int = _limit(64, "open connections at once; more are answered 503 and closed")
    max_streams: int = _limit(32, "/generate requests running or waiting at once; more are answered 429")
    shutdown_grace_s: float = _limit(30.0, "after SIGTERM: seconds the requests in flight get to finish (new ones "
                                           "are answered 503)")

    def oversize(self, texts: list, field: str, chars: bool = True) -> str | None:
        """What is over the size caps in one request's ``texts`` (the request field ``field``): too many of them, or
        (``chars``) one over ``max_chars``; None when nothing is. Every route answers it 413."""
        if len(texts) > self.max_texts:
            return f"{field}: {len(texts)} texts; the server takes {self.max_texts} a request"
        for i, text in enumerate(texts if chars else ()):
            if len(text) > self.max_chars:
                return f"{field}: text {i} has {len(text)} characters; the limit is {self.max_chars}"
        return None
