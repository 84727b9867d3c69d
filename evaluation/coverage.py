"""What a live transcript leaves out: the dev-set items with a reference, and their scoring.

Used by ``python -m bench.realtime --coverage``. A stream may be accurate word by word
and still drop a whole utterance without an error (the client cannot tell), so each
item's reference is cut into utterances (a conversation's turns, or the whole reference of
a single recording) and every utterance is checked against the closing transcript:

* **never shown**: not one of its words is matched in the alignment of the reference
  (utterances in order of start) to the transcript;
* **mostly lost**: under half of its words matched;
* **invented tail**: words the transcript adds after the last reference word it matched
  (Whisper's "Thank you." at the end of a stream).

Text is compared after Whisper's English normaliser on both sides (numbers as digits,
contractions spelled out), the convention of the batch benchmarks, with one addition applied
to both sides: numbers written apart are joined (:func:`~evaluation.text.numbers_joined`;
the normaliser made "five five" "55" but "5, 5" "5 5", so a correct transcript never showed
the prompt).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jiwer

from .items import choose_items
from .text import numbers_joined

__all__ = ["CoverageItem", "UtteranceScore", "dev_items", "score_utterances", "invented_tail",
           "matched_words"]


@dataclass(frozen=True)
class CoverageItem:
    """One eval file and its reference cut into utterances (in order of start)."""

    path: str
    group: str
    duration: float
    utterances: tuple[str, ...]

    @property
    def reference(self) -> str:
        return " ".join(self.utterances)


@dataclass(frozen=True)
class UtteranceScore:
    words: int
    matched: int

    @property
    def never_shown(self) -> bool:
        return self.words > 0 and self.matched == 0

    @property
    def mostly_lost(self) -> bool:
        return self.words > 0 and self.matched * 2 < self.words


def dev_items(eval_dir: Path, prompts: int = 20) -> list[CoverageItem]:
    """Every conversation, every real recording with a quoted reference, and an even sample
    of ``prompts`` Asterisk prompts (the batch benchmark's choice)."""
    manifest: dict[str, Any] = json.loads((eval_dir / "manifest.json").read_text())
    out = []
    for item in manifest["items"]:
        if item["kind"] != "synthetic" or not item.get("reference_segments"):
            continue
        if not item["path"].endswith(".wav"):
            continue
        turns = sorted(item["reference_segments"], key=lambda t: t["start"])
        out.append(CoverageItem(item["path"], "conversation", item["duration"] or 0.0,
                                tuple(t["text"] for t in turns if t.get("text"))))
    for item in choose_items(manifest, prompts):
        out.append(CoverageItem(item["path"], item["path"].split("/")[1],
                                item["duration"] or 0.0, (item["reference_text"],)))
    return out


def score_utterances(utterances: list[str] | tuple[str, ...], hypothesis: str
                     ) -> list[UtteranceScore]:
    """How many words of each utterance the transcript matches (one alignment for all)."""
    words = [numbers_joined(u).split() for u in utterances]
    owner = [k for k, w in enumerate(words) for _ in w]
    matched = [0] * len(words)
    for i in matched_words([x for w in words for x in w], numbers_joined(hypothesis).split()):
        matched[owner[i]] += 1
    return [UtteranceScore(len(w), m) for w, m in zip(words, matched)]


def matched_words(ref: list[str], hyp: list[str]) -> list[int]:
    """Indices of ``ref`` matched by an alignment with the fewest edits (the WER's), and of
    those the one with the most matched words.

    jiwer picks one of the alignments of equal cost without regard to matches: "the door
    really yes" against "really all yes" came out as two substitutions and a deletion, so
    the interjection "Really?", which the transcript has, counted as never shown.
    """
    n, m = len(ref), len(hyp)
    # cost[i][j] = (edits, -matches) of aligning ref[:i] with hyp[:j]
    cost = [[(j, 0) for j in range(m + 1)]] + [[(i, 0)] + [None] * m for i in range(1, n + 1)]
    for i in range(1, n + 1):
        row, up = cost[i], cost[i - 1]
        for j in range(1, m + 1):
            e, g = up[j - 1]
            diag = (e, g - 1) if ref[i - 1] == hyp[j - 1] else (e + 1, g)
            d, ins = up[j], row[j - 1]
            row[j] = min(diag, (d[0] + 1, d[1]), (ins[0] + 1, ins[1]))
    out, i, j = [], n, m
    while i and j:
        e, g = cost[i - 1][j - 1]
        same = ref[i - 1] == hyp[j - 1]
        if cost[i][j] == ((e, g - 1) if same else (e + 1, g)):
            if same:
                out.append(i - 1)
            i, j = i - 1, j - 1
        elif cost[i][j] == (cost[i - 1][j][0] + 1, cost[i - 1][j][1]):
            i -= 1
        else:
            j -= 1
    return out[::-1]


def invented_tail(reference: str, hypothesis: str) -> str:
    """Words of ``hypothesis`` after the last one that matches ``reference`` ('' if none)."""
    ref, hyp = numbers_joined(reference), numbers_joined(hypothesis)
    if not hyp:
        return ""
    if not ref:
        return hyp
    out = jiwer.process_words(ref, hyp)
    last = -1
    for chunk in out.alignments[0]:
        if chunk.type in ("equal", "substitute"):
            last = chunk.hyp_end_idx
    return " ".join(w for w in hyp.split()[max(last, 0):] if any(c.isalnum() for c in w))
