"""Speaker-attributed transcript from recognised words and diarization turns.

Speakers are named ``speaker_1``, ``speaker_2``, … (1-based, as people count) in order of
their first word. Only speakers with at least one word are listed, so every listed
speaker appears in ``utterances``; with no words the result is empty throughout.

A multichannel job is not diarized (``assemble_channels``): a word's speaker is its
channel, ``speaker_<n>`` for channel ``n``, and each channel's speech regions stand for its
turns.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from schemas.api import Speaker
from schemas.records import ResultUtterance, ResultWord, TranscriptResult

from ..types import Region, SpeakerTurn, TimedWord

__all__ = ["AssembleOptions", "assemble", "assemble_channels", "speaker_id"]


class AssembleOptions(BaseModel):
    """How words are grouped into utterances."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_pause: float = Field(1.5, ge=0, description=(
        "A silence longer than this, s, between two words of one speaker starts a new "
        "utterance."))


def speaker_id(index: int) -> str:
    """Public id of the speaker at 0-based position ``index`` in order of first speech."""
    return f"speaker_{index + 1}"


def _ms(value: float) -> float:
    return round(value, 3)


class _Turns:
    """Turns indexed for nearest/most-overlapping lookup in O(log n + overlaps)."""

    def __init__(self, turns: Sequence[SpeakerTurn]) -> None:
        self.turns = sorted(turns, key=lambda t: (t.start, t.end))
        self.starts = [t.start for t in self.turns]
        ends = np.array([t.end for t in self.turns], dtype=np.float64)
        # Running maximum of ends (and where it was reached) bounds the backward scan.
        self.max_end = np.maximum.accumulate(ends) if len(ends) else ends
        self.arg_max_end = np.zeros(len(ends), dtype=np.int64)
        for i in range(1, len(ends)):
            self.arg_max_end[i] = i if ends[i] >= self.max_end[i - 1] else self.arg_max_end[i - 1]

    def speaker_of(self, start: float, end: float) -> int:
        """Speaker most active over [start, end] (their turns' overlaps summed), else the
        speaker of the nearest turn."""
        idx = bisect_right(self.starts, end)
        candidates = []
        j = idx - 1
        while j >= 0 and self.max_end[j] > start:
            candidates.append(j)
            j -= 1
        if j >= 0:
            candidates.append(int(self.arg_max_end[j]))
        if idx < len(self.turns):
            candidates.append(idx)
        # Overlap length, negative for a gap: the largest is the best overlap or nearest
        # turn. Ties (a word inside two overlapping turns) go to the turn centred nearer.
        mid = (start + end) / 2

        # A speaker's overlaps add up: the word goes to whoever is most active over it.
        active: dict[int, float] = {}
        for k in candidates:
            t = self.turns[k]
            overlap = min(end, t.end) - max(start, t.start)
            if overlap > 0:
                active[t.speaker] = active.get(t.speaker, 0.0) + overlap

        def score(k: int) -> tuple[float, float]:
            t = self.turns[k]
            own = active.get(t.speaker, min(end, t.end) - max(start, t.start))
            return own, -abs((t.start + t.end) / 2 - mid)

        return self.turns[max(candidates, key=score)].speaker


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def _covered(spans: list[tuple[float, float]], point: float) -> bool:
    i = bisect_right(spans, (point, float("inf"))) - 1
    return i >= 0 and spans[i][0] <= point <= spans[i][1]


def assemble(words: Sequence[TimedWord], turns: Sequence[SpeakerTurn],
             opts: AssembleOptions | None = None,
             speakers: Sequence[int] | None = None) -> TranscriptResult:
    """Attribute each word to a speaker and group words into utterances.

    Each word takes the speaker most active over its span, i.e. whose turns overlap it
    most in total (the nearest turn's if none; between equals, the turn centred nearer).
    An utterance is a run of one speaker's words; it ends at a pause longer than
    ``max_pause`` or when another speaker talks while this one has no turn. Where turns
    overlap, the utterances of both speakers therefore overlap too. Times are rounded to
    milliseconds; ``speaking_time`` is the speaker's total turn time.

    Args:
      words: recognised words, any order (sorted here by time).
      turns: diarization turns; empty means a single speaker.
      opts: grouping options.
      speakers: each word's speaker (same order as ``words``), given rather than taken
        from ``turns``, which then only bound utterances and give speaking times; speaker
        ``k`` is then ``speaker_id(k)`` whatever the order of first words.

    Returns:
      The result fields of a completed transcript.
    """
    opts = opts or AssembleOptions()
    pairs = sorted(((w, k) for w, k in zip(words, speakers if speakers is not None
                                             else [0] * len(words)) if w.text.strip()),
                   key=lambda p: (p[0].start, max(p[0].start, p[0].end)))
    kept = [w for w, _ in pairs]
    items = [(w.text.strip(), w.start, max(w.start, w.end)) for w in kept]
    if not items:
        return TranscriptResult()
    order: dict[int, int] = {}
    if speakers is not None:
        raw = [k for _, k in pairs]
        order = {k: k for k in sorted(set(raw))}
    else:
        index = _Turns(turns)
        raw = [index.speaker_of(s, e) if turns else 0 for _, s, e in items]
        for spk in raw:
            order.setdefault(spk, len(order))
    labels = [order[spk] for spk in raw]
    spans: dict[int, list[tuple[float, float]]] = {k: [] for k in order.values()}
    for t in turns:
        if t.speaker in order:
            spans[order[t.speaker]].append((t.start, t.end))
    spans = {k: _union(v) for k, v in spans.items()}

    out_words = [ResultWord(text=text, start=_ms(s), end=_ms(e), speaker=speaker_id(k),
                            text_formatted=w.formatted)
                 for (text, s, e), k, w in zip(items, labels, kept)]
    groups: list[list[int]] = []
    open_group: dict[int, list[int]] = {}
    for i, ((_, s, e), k) in enumerate(zip(items, labels)):
        mid = (s + e) / 2
        for other in list(open_group):
            if other != k and not (turns and _covered(spans[other], mid)):
                del open_group[other]
        group = open_group.get(k)
        if group is None or s - items[group[-1]][2] > opts.max_pause:
            group = []
            groups.append(group)
            open_group[k] = group
        group.append(i)

    utterances = [
        ResultUtterance(speaker=speaker_id(labels[g[0]]), start=out_words[g[0]].start,
                  end=max(out_words[i].end for i in g),
                  text=" ".join(out_words[i].text for i in g), words=[out_words[i] for i in g])
        for g in groups
    ]
    utterances.sort(key=lambda u: (u.start, u.end))
    if turns:
        speaking = {k: sum(e - s for s, e in v) for k, v in spans.items()}
    else:
        speaking = {k: sum(u.end - u.start for u in utterances if u.speaker == speaker_id(k))
                    for k in order.values()}
    listed = [Speaker(id=speaker_id(k), speaking_time=_ms(speaking[k]))
              for k in sorted(order.values())]
    return TranscriptResult(text=" ".join(w.text for w in out_words), speakers=listed,
                            utterances=utterances, words=out_words,
                            word_confidence=[round(min(1.0, max(0.0, w.probability)), 4)
                                             for w in kept])


def assemble_channels(words: Sequence[TimedWord], speech: dict[int, list[Region]],
                      opts: AssembleOptions | None = None) -> TranscriptResult:
    """A multichannel job's transcript, without diarization: a word's speaker is its channel
    (``speaker_<n>`` for channel ``n``) and each channel's speech regions (``speech``, by
    channel) are its turns. Words come from every channel, in order of time."""
    turns = [SpeakerTurn(n - 1, r.start, r.end) for n, regions in speech.items()
             for r in regions]
    return assemble(words, turns, opts, speakers=[(w.channel or 1) - 1 for w in words])
