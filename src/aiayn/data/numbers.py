"""The number-to-words task: digits in, English words out ("4021" -> "four thousand twenty-one")."""

from __future__ import annotations

import random

ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
        "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
SCALES = [(10**9, "billion"), (10**6, "million"), (1000, "thousand")]


def _below_thousand(n: int) -> list[str]:
    words = []
    if n >= 100:
        words += [ONES[n // 100], "hundred"]
        n %= 100
    if n >= 20:
        words.append(TENS[n // 10] + (f"-{ONES[n % 10]}" if n % 10 else ""))
    elif n or not words:
        words.append(ONES[n])
    return words


def number_to_words(n: int) -> str:
    """English words for 0 <= n < 10^12, American style without "and"."""
    if not 0 <= n < 10**12:
        raise ValueError(f"number_to_words: {n} is outside [0, 10^12)")
    if n == 0:
        return "zero"
    words = []
    for value, name in SCALES:
        if n >= value:
            words += [*_below_thousand(n // value), name]
            n %= value
    if n:
        words += _below_thousand(n)
    return " ".join(words)


def number_pairs(count: int, seed: int, max_digits: int = 7) -> tuple[list[str], list[str]]:
    """``count`` random (digits, words) pairs, the number of digits uniform in 1..max_digits."""
    rng = random.Random(seed)
    numbers = [rng.randrange(10 ** (d - 1) if d > 1 else 0, 10**d)
               for d in (rng.randint(1, max_digits) for _ in range(count))]
    return [str(n) for n in numbers], [number_to_words(n) for n in numbers]
