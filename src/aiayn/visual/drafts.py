"""Speculative decoding seen from inside (``aiayn show drafts``): pass by pass, the tokens a draft guessed, the run
of them the main model agreed with, the first it refused, and the main model's own token that ends every pass
(``decoding/speculative.py``): the output is the main model's own, in fewer passes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from aiayn.visual.figures import pyplot, save_figure

AGREED, REFUSED, UNJUDGED, OWN = "#8ce99a", "#ffa8a8", "#e9ecef", "#ffffff"


@dataclass
class DraftedPass:
    """One pass of the main model: the ``agreed`` guesses it kept, the guess it ``refused`` (None: none), the
    guesses after that one it never judged, and its ``own`` token (None: an agreed guess ended the output) (token
    pieces, as text)."""

    agreed: list[str]
    refused: str | None
    unjudged: list[str]
    own: str | None


def drafted_passes(passes: list[tuple[list[int], list[int]]], piece: Callable[[int], str],
                   end_ids: tuple[int, ...] = ()) -> list[DraftedPass]:
    """``SpeculativeStats.passes`` (each pass's guesses and what it kept) as pieces of text, ``piece(id)``; nothing
    after an end id (one of ``end_ids``) is part of the output, so a pass is cut there."""
    found = []
    for guess, kept in passes:
        n = len(kept) - 1  # the guesses agreed with; kept[-1] is the main model's own token
        end = next((j for j, t in enumerate(kept[:n]) if t in end_ids), None)
        if end is not None:  # an agreed guess ended the output
            found.append(DraftedPass([piece(t) for t in guess[: end + 1]], None, [], None))
            continue
        found.append(DraftedPass([piece(t) for t in guess[:n]], piece(guess[n]) if n < len(guess) else None,
                                 [piece(t) for t in guess[n + 1:]], piece(kept[-1])))
    return found


def seen(text: str) -> str:
    """A piece with its spaces and line breaks visible."""
    return text.replace(" ", "·").replace("\n", "⏎") or "∅"


def format_drafts(found: list[DraftedPass]) -> str:
    """One line a pass: ✓ each agreed guess, ✗ the refused one, (n more) the unjudged, → the model's own token."""
    lines = []
    for k, p in enumerate(found, 1):
        words = [f"✓{seen(t)}" for t in p.agreed] + ([f"✗{seen(p.refused)}"] if p.refused is not None else [])
        words += [f"({len(p.unjudged)} more)"] if p.unjudged else []
        lines.append(f"pass {k:3d}: {' '.join(words + ([] if p.own is None else [f'→ {seen(p.own)}']))}")
    return "\n".join(lines) + "\n"


def plot_drafts(found: list[DraftedPass], output: str | Path, title: str, most: int = 30) -> Path:
    """A row a pass (the first ``most``): boxes for the agreed guesses (green), the refused one (red), the unjudged
    (grey), then the main model's own token (framed)."""
    plt = pyplot()
    shown = found[:most]
    rows = [[(t, AGREED) for t in p.agreed] + ([(p.refused, REFUSED)] if p.refused is not None else [])
            + [(t, UNJUDGED) for t in p.unjudged] + ([(p.own, OWN)] if p.own is not None else []) for p in shown]
    width = max(sum(max(1, len(seen(t))) + 0.6 for t, _ in row) for row in rows)
    fig, ax = plt.subplots(figsize=(min(18.0, 1.5 + 0.13 * width), 1.2 + 0.32 * len(rows)), layout="constrained")
    for r, row in enumerate(rows):
        x = 0.0
        for text, colour in row:
            w = max(1, len(seen(text)))
            edge = "#1c7ed6" if colour == OWN else "none"
            ax.add_patch(plt.Rectangle((x, r - 0.38), w + 0.3, 0.76, facecolor=colour, edgecolor=edge, linewidth=1.5))
            ax.text(x + 0.15 + w / 2, r, seen(text), ha="center", va="center", fontsize=7, family="monospace")
            x += w + 0.6
    ax.set_xlim(-0.3, width + 0.3)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_yticks(range(len(rows)), [f"pass {k}" for k in range(1, len(rows) + 1)], fontsize=7)
    ax.set_xticks([])
    for side in ("top", "right", "bottom"):
        ax.spines[side].set_visible(False)
    more = f" (the first {most} of {len(found)} passes)" if len(found) > most else ""
    ax.set_title(f"{title}{more}\ngreen: guessed and kept · red: refused · grey: never judged · "
                 "framed: the model's own token", fontsize=8)
    return save_figure(fig, output)
