"""SRT and WebVTT captions for a completed transcript (``GET /v1/transcripts/{id}/subtitles``).

Cues are built from word times, one speaker turn at a time, so a cue never mixes
speakers and never splits a word. Each cue is one line, ``[speaker_<n>] <text>``.
The conventions follow common broadcast and streaming practice (one 42-character
line, at most 7 s on screen, at least 1 s, at most 20 characters per second):

* ``chars_per_caption`` bounds the cue text after the speaker label; the label is
  left out of the count because it is metadata the client may style or strip, and
  counting it would shrink captions unevenly between ``speaker_1`` and ``speaker_12``.
  A single word longer than the limit gets a cue of its own.
* A cue ends before a word that would exceed ``chars_per_caption`` or
  ``max_duration_s``, or that follows a pause longer than ``max_gap_s``.
* A cue shorter than ``min_duration_s``, or read faster than ``max_chars_per_s``,
  is lengthened into the silence after it, never past the start of the next cue
  (of any speaker) nor past ``max_duration_s``. Speech that is itself faster than
  the reading limit stays as spoken: splitting does not change characters per second.

Cues are ordered by start. Cues of one speaker never overlap; overlapping speech of
two speakers gives overlapping cues, which both formats allow.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, model_validator

from schemas.api import Word
from schemas.records import TranscriptResult

__all__ = ["CaptionOptions", "Cue", "build_cues", "render_srt", "render_vtt"]


class CaptionOptions(BaseModel):
    """How words are grouped into cues; times are seconds."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    chars_per_caption: int = Field(42, ge=10, le=200)
    """Maximum characters of cue text, speaker label excluded (spec range 10 to 200)."""
    max_duration_s: float = Field(7.0, gt=0)
    """Longest time a cue stays on screen, unless one word alone takes longer."""
    min_duration_s: float = Field(1.0, ge=0)
    """Shortest time a cue stays on screen, where the following silence allows."""
    max_chars_per_s: float = Field(20.0, gt=0)
    """Reading speed a cue's display time is stretched to, where silence allows."""
    max_gap_s: float = Field(1.0, ge=0)
    """A pause longer than this between two words of one speaker starts a new cue."""

    @model_validator(mode="after")
    def _durations_ordered(self) -> CaptionOptions:
        if self.min_duration_s > self.max_duration_s:
            raise ValueError("min_duration_s must not exceed max_duration_s")
        return self


@dataclass(frozen=True, slots=True)
class Cue:
    """One caption: shown from ``start`` to ``end`` (seconds); ``text`` has no label."""

    start: float
    end: float
    speaker: str
    text: str

    @property
    def line(self) -> str:
        return f"[{self.speaker}] {self.text}" if self.speaker else self.text


def _turns(result: TranscriptResult) -> list[list[Word]]:
    """Word runs of one speaker each: the utterances, or speaker runs of ``words`` without them."""
    if result.utterances:
        return [sorted(u.words, key=lambda w: (w.start, w.end)) for u in result.utterances]
    turns: list[list[Word]] = []
    for word in result.words:
        if turns and turns[-1][-1].speaker == word.speaker:
            turns[-1].append(word)
        else:
            turns.append([word])
    return turns


def _clean(text: str) -> str:
    # A newline inside a word would end the cue early in both formats.
    return " ".join(text.split())


def _group(words: Sequence[Word], opts: CaptionOptions) -> Iterable[Cue]:
    """Greedy split of one speaker turn into cues (word times untouched)."""
    texts: list[str] = []
    start = end = 0.0
    length = 0
    for word in words:
        text = _clean(word.text)
        if not text:
            continue
        if texts and (length + 1 + len(text) > opts.chars_per_caption
                      or word.end - start > opts.max_duration_s
                      or word.start - end > opts.max_gap_s):
            yield Cue(start, end, words[0].speaker, " ".join(texts))
            texts = []
        if not texts:
            start, length = word.start, -1
        texts.append(text)
        length += 1 + len(text)
        end = max(end, word.end) if len(texts) > 1 else word.end
    if texts:
        yield Cue(start, end, words[0].speaker, " ".join(texts))


def _settle(cues: list[Cue], opts: CaptionOptions) -> list[Cue]:
    """Trim overlaps within a speaker, then lengthen short or fast cues into silence."""
    last_by_speaker: dict[str, int] = {}
    for i, cue in enumerate(cues):
        j = last_by_speaker.get(cue.speaker)
        if j is not None and cues[j].end > cue.start:
            cues[j] = Cue(cues[j].start, max(cues[j].start, cue.start), cues[j].speaker,
                          cues[j].text)
        last_by_speaker[cue.speaker] = i
    settled = []
    for i, cue in enumerate(cues):
        wanted = max(opts.min_duration_s, len(cue.text) / opts.max_chars_per_s)
        target = min(cue.start + wanted, cue.start + opts.max_duration_s)
        if i + 1 < len(cues):  # sorted by start: the next cue starts first
            target = min(target, cues[i + 1].start)
        settled.append(Cue(cue.start, max(cue.end, target), cue.speaker, cue.text))
    return settled


def build_cues(result: TranscriptResult, options: CaptionOptions | None = None) -> list[Cue]:
    """The cues of ``result`` in start order, format-neutral."""
    opts = options or CaptionOptions()
    cues = [cue for turn in _turns(result) for cue in _group(turn, opts)]
    cues.sort(key=lambda c: (c.start, c.end))
    return _settle(cues, opts)


def _timestamp(seconds: float, separator: str) -> str:
    ms = max(0, round(seconds * 1000))
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    secs, ms = divmod(ms, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{separator}{ms:03d}"


def render_srt(result: TranscriptResult, options: CaptionOptions | None = None) -> str:
    """SubRip text: numbered cues, ``HH:MM:SS,mmm`` times; empty string for no words."""
    blocks = [
        f"{n}\n{_timestamp(c.start, ',')} --> {_timestamp(c.end, ',')}\n{c.line}\n"
        for n, c in enumerate(build_cues(result, options), start=1)
    ]
    return "\n".join(blocks)


def _vtt_escape(text: str) -> str:
    # WebVTT cue payloads treat '<' and '&' as markup, and '-->' would end the timing line.
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def render_vtt(result: TranscriptResult, options: CaptionOptions | None = None) -> str:
    """WebVTT text: ``WEBVTT`` header, ``HH:MM:SS.mmm`` times; just the header for no words."""
    blocks = [
        f"{_timestamp(c.start, '.')} --> {_timestamp(c.end, '.')}\n{_vtt_escape(c.line)}\n"
        for c in build_cues(result, options)
    ]
    return "\n".join(["WEBVTT\n", *blocks])
