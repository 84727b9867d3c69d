"""Turns of ``/v3/ws`` from the live engine's transcripts: a pure state machine.

The worker sends the whole transcript so far (punctuated and cased) each time it changes;
``is_final`` settles a segment, which the engine closes after 192 ms of silence. A v3 *turn*
is one or more such segments:

* while it grows, a ``Turn`` with ``end_of_turn`` false carries its words, unformatted
  (lowercase, no punctuation), those of settled segments ``word_is_final``;
* after a settled segment, the turn ends once the silence since its speech end reaches
  ``min_turn_silence`` when ``end_of_turn_confidence`` is at least the threshold, else
  ``max_turn_silence``; silence is audio received with no new words (speech that resumes is
  seen at the engine's first partial of it, which keeps the turn open). The silence counts
  from the speech end, so a value under the engine's 192 ms ends the turn at the final;
* the ended turn goes out unformatted with ``end_of_turn`` true, then, with
  ``format_turns``, once more formatted (``turn_is_formatted``): the recogniser's own
  punctuation and casing;
* ``ForceEndpoint`` ends the turn at once with every word heard so far (a segment still
  open gives its latest partial words; what the engine settles of it beyond them starts the
  next turn); the end of the stream ends it too.

``end_of_turn_confidence`` is the share of segments that ended a speaker's turn in the eval
set's conversations, split by whether the segment ends a sentence (``.``, ``?``, ``!``):
:data:`CONFIDENCE`, measured by ``python -m bench.turn_confidence``. Word times are spread
over each segment's span by word length (the engine gives segment times, not word times);
a word's ``confidence`` is 1.0 (the live recogniser gives none).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from schemas.assemblyai_streaming import V3Turn, V3Word

__all__ = ["CONFIDENCE", "TurnRules", "TurnTracker", "unformatted", "word_times"]

CONFIDENCE = {True: 0.77, False: 0.33}
"""``end_of_turn_confidence`` by whether the turn's last segment ends a sentence: the share of
such segments that ended a turn in the eval set's three conversations, one turn end and one
not added to each (``python -m bench.turn_confidence``: 35 of 45 segments that end a
sentence ended a turn, 0 of the 1 that did not)."""

_MARKS = re.compile(r"[^\w'\s-]+|(?<!\w)[-']|[-'](?!\w)")


def unformatted(text: str) -> str:
    """AssemblyAI's unformatted form: lowercase, no punctuation (inner ``'`` and ``-`` kept)."""
    return " ".join(_MARKS.sub("", text).lower().split())


def word_times(words: list[str], start: float, end: float) -> list[tuple[int, int]]:
    """(start, end) ms of each word, the span ``start``-``end`` s shared by word length."""
    total = sum(len(w) for w in words) or 1
    out, at = [], start
    for w in words:
        step = (end - start) * len(w) / total
        out.append((round(at * 1000), round((at + step) * 1000)))
        at += step
    return out


@dataclass
class TurnRules:
    """The session's turn settings (``UpdateConfiguration`` changes them)."""

    threshold: float = 0.4
    min_silence_ms: int = 400
    max_silence_ms: int = 1280
    format_turns: bool = False


@dataclass(frozen=True, slots=True)
class _Span:
    first: int      # index of its first word in the whole transcript
    last: int       # one past its last word
    start: float    # s of the stream
    end: float
    final: bool


class TurnTracker:
    """Turns of one session. ``heard_s`` is the audio received so far, s of the stream."""

    def __init__(self, rules: TurnRules) -> None:
        self.rules = rules
        self.order = 0
        self._words: list[str] = []      # the whole transcript, formatted
        self._done = 0                   # words given to ended turns
        self._settled = 0                # words of settled segments
        self._spans: list[_Span] = []    # settled segments not yet wholly in ended turns
        self._open: _Span | None = None  # the open segment's latest partial
        self._speech_end: float | None = None   # the last settled segment's speech end
        self._sent: tuple[str, ...] = ()        # words of the last partial turn sent

    @property
    def confidence(self) -> float:
        last = self._words[self._settled - 1] if self._settled > self._done else ""
        return CONFIDENCE[last[-1:] in (".", "?", "!")]

    # --- inputs -------------------------------------------------------------------------------

    def transcript(self, text: str, is_final: bool, start: float, end: float,
                   heard_s: float) -> list[V3Turn]:
        """A worker transcript: ``end`` is the speech end of a final, the audio covered of a
        partial."""
        words = text.split()
        if len(words) < self._done:
            return []   # a replaying worker behind what the turns already hold
        self._words = words
        out: list[V3Turn] = []
        if is_final:
            if len(words) > self._settled:
                self._spans.append(_Span(self._settled, len(words), start, end, True))
                self._settled = len(words)
                self._speech_end = end
            self._open = None
        elif len(words) > self._settled:
            self._open = _Span(self._settled, len(words), start, end, False)
            self._speech_end = None     # speech goes on: the turn stays open
        turn = self._partial()
        if turn is not None:
            out.append(turn)
        return out + self.heard(heard_s)

    def heard(self, heard_s: float) -> list[V3Turn]:
        """Audio up to ``heard_s`` received: the turn ends if its silence is long enough."""
        if self._speech_end is None or self._settled <= self._done:
            return []
        r = self.rules
        need = r.min_silence_ms if self.confidence >= r.threshold else r.max_silence_ms
        if (heard_s - self._speech_end) * 1000 + 1e-6 < need:
            return []
        return self._end(self._settled)

    def force(self) -> list[V3Turn]:
        """``ForceEndpoint``: end the turn now with every word heard."""
        return self._end(len(self._words))

    def finish(self) -> list[V3Turn]:
        """The stream ended (after the engine's last final): end the open turn."""
        return self._end(len(self._words))

    # --- turns --------------------------------------------------------------------------------

    def _turn_words(self, upto: int) -> list[V3Word]:
        spans = self._spans + ([self._open] if self._open is not None else [])
        out: list[V3Word] = []
        for span in spans:
            words = self._words[span.first:span.last]
            for i, (s, e) in enumerate(word_times(words, span.start, span.end)):
                k = span.first + i
                if self._done <= k < upto:
                    out.append(V3Word(start=s, end=e, confidence=1.0, text=words[i],
                                      word_is_final=span.final))
        return out

    def _partial(self) -> V3Turn | None:
        words = tuple(self._words[self._done:])
        if not words or words == self._sent:
            return None
        self._sent = words
        return self._turn(self._turn_words(len(self._words)), end=False, formatted=False)

    def _turn(self, words: list[V3Word], *, end: bool, formatted: bool) -> V3Turn:
        text = " ".join(w.text for w in words)
        if not formatted:
            text = unformatted(text)
            words = [w.model_copy(update={"text": unformatted(w.text)}) for w in words]
        return V3Turn(turn_order=self.order, turn_is_formatted=formatted, end_of_turn=end,
                      transcript=text, end_of_turn_confidence=self.confidence if end else 0.0,
                      words=[w for w in words if w.text])

    def _end(self, upto: int) -> list[V3Turn]:
        if upto <= self._done:
            return []
        words = self._turn_words(upto)
        if len(words) < upto - self._done:   # forced mid-segment past the spans: untimed
            words += [V3Word(start=0, end=0, confidence=1.0, text=w, word_is_final=False)
                      for w in self._words[self._done + len(words):upto]]
        words = [w.model_copy(update={"word_is_final": True}) for w in words]
        out = [self._turn(words, end=True, formatted=False)]
        if self.rules.format_turns:
            out.append(self._turn(words, end=True, formatted=True))
        self._done = max(upto, self._done)
        self._settled = max(self._settled, self._done)
        self._spans = [s for s in self._spans if s.last > self._done]
        if self._open is not None and self._open.last <= self._done:
            self._open = None
        self._speech_end = None
        self._sent = ()
        self.order += 1
        return out
