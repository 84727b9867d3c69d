"""Captions: rendered with gateway.subtitles, read back with the real srt and webvtt parsers."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

import pydantic
import pytest
import srt
import webvtt

from gateway.subtitles import CaptionOptions, build_cues, render_srt, render_vtt
from schemas.api import Speaker, Utterance, Word
from schemas.records import TranscriptResult

VOCABULARY = ("the", "a", "we", "should", "probably", "schedule", "meeting", "about", "budget",
              "next", "quarter", "i", "think", "that", "is", "reasonable", "but", "marketing",
              "numbers", "are", "still", "incomplete", "okay", "yes", "absolutely", "and",
              "engineering", "headcount", "forecast", "so", "let's", "review", "tomorrow")
LABEL = re.compile(r"^\[(speaker_\d+)\] (.*)$")
SRT_TIME = re.compile(r"^\d{2}:\d{2}:\d{2},\d{3} --> \d{2}:\d{2}:\d{2},\d{3}$", re.M)
VTT_TIME = re.compile(r"^\d{2}:\d{2}:\d{2}\.\d{3} --> \d{2}:\d{2}:\d{2}\.\d{3}$", re.M)


def transcript(words: list[tuple[str, float, float, str]]) -> TranscriptResult:
    """A result whose utterances are the speaker runs of ``words`` (given in time order)."""
    ws = [Word(text=t, start=s, end=e, speaker=sp) for t, s, e, sp in words]
    runs: list[list[Word]] = []
    for w in ws:
        if runs and runs[-1][-1].speaker == w.speaker:
            runs[-1].append(w)
        else:
            runs.append([w])
    utterances = [Utterance(speaker=r[0].speaker, start=r[0].start, end=r[-1].end,
                            text=" ".join(w.text for w in r), words=r) for r in runs]
    speakers = sorted({w.speaker for w in ws})
    return TranscriptResult(
        text=" ".join(w.text for w in ws), words=ws, utterances=utterances,
        speakers=[Speaker(id=s, speaking_time=sum(w.end - w.start for w in ws if w.speaker == s))
                  for s in speakers])


def conversation(seed: int = 7, n: int = 60, span_s: float = 20.0) -> TranscriptResult:
    """~60 words over 20 s, two speakers taking turns, with short and long pauses."""
    rng = random.Random(seed)
    t, speaker, words = 0.2, 0, []
    step = span_s / n
    for i in range(n):
        if i and rng.random() < 0.12:
            speaker = 1 - speaker
            t += rng.uniform(0.1, 0.8)
        if rng.random() < 0.08:
            t += rng.uniform(1.2, 2.5)  # a pause long enough to start a new cue
        dur = rng.uniform(0.12, step * 0.9)
        words.append((rng.choice(VOCABULARY), round(t, 3), round(t + dur, 3), f"speaker_{speaker}"))
        t += dur + rng.uniform(0.0, step * 0.3)
    return transcript(words)


@dataclass
class Parsed:
    start: float
    end: float
    speaker: str
    text: str


def _vtt_seconds(stamp: str) -> float:
    h, m, s = stamp.split(":")
    return int(h) * 3600 + int(m) * 60 + float(s)


def parse_srt(text: str) -> list[Parsed]:
    out = []
    for n, sub in enumerate(srt.parse(text), start=1):
        assert sub.index == n
        match = LABEL.match(sub.content)
        assert match, sub.content
        out.append(Parsed(sub.start.total_seconds(), sub.end.total_seconds(), *match.groups()))
    return out


def parse_vtt(text: str) -> list[Parsed]:
    out = []
    for cap in webvtt.from_string(text).captions:
        match = LABEL.match(cap.text)
        assert match, cap.text
        out.append(Parsed(_vtt_seconds(cap.start), _vtt_seconds(cap.end), *match.groups()))
    return out


def rendered(result: TranscriptResult, opts: CaptionOptions) -> list[list[Parsed]]:
    srt_text, vtt_text = render_srt(result, opts), render_vtt(result, opts)
    assert vtt_text.startswith("WEBVTT\n\n")
    assert len(SRT_TIME.findall(srt_text)) == len(VTT_TIME.findall(vtt_text))
    a, b = parse_srt(srt_text), parse_vtt(vtt_text)
    assert a == b
    return [a, b]


def check_invariants(result: TranscriptResult, cues: list[Parsed], opts: CaptionOptions) -> None:
    # Every word once, in order, per speaker; and overall when turns do not overlap.
    for speaker in {w.speaker for w in result.words}:
        said = [w.text for w in result.words if w.speaker == speaker]
        shown = [t for c in cues if c.speaker == speaker for t in c.text.split(" ")]
        assert shown == said
    assert sum(len(c.text.split(" ")) for c in cues) == len(result.words)
    # Ordered by start, no overlap within a speaker, never longer than the limit.
    assert [c.start for c in cues] == sorted(c.start for c in cues)
    last_end: dict[str, float] = {}
    for c in cues:
        assert c.start <= c.end
        assert c.start >= last_end.get(c.speaker, 0.0)
        last_end[c.speaker] = c.end
        single = " " not in c.text
        assert len(c.text) <= opts.chars_per_caption or single
    # Each cue's words are one speaker's and lie within the cue.
    words_by_speaker = {s: [w for w in result.words if w.speaker == s] for s in last_end}
    for c in cues:
        count = len(c.text.split(" "))
        ws, words_by_speaker[c.speaker] = (words_by_speaker[c.speaker][:count],
                                           words_by_speaker[c.speaker][count:])
        assert c.start == pytest.approx(ws[0].start, abs=1e-3)
        assert c.end >= ws[-1].end - 1e-3
        spoken = ws[-1].end - ws[0].start
        assert spoken <= opts.max_duration_s or count == 1
        assert c.end - c.start <= max(spoken, opts.max_duration_s) + 1e-3


def test_empty_transcript() -> None:
    assert render_srt(TranscriptResult()) == ""
    assert render_vtt(TranscriptResult()) == "WEBVTT\n"
    assert list(srt.parse(render_srt(TranscriptResult()))) == []
    assert webvtt.from_string(render_vtt(TranscriptResult())).captions == []


@pytest.mark.parametrize("chars", [10, 16, 32, 42, 80, 200])
@pytest.mark.parametrize("seed", [1, 7, 23])
def test_conversation(chars: int, seed: int) -> None:
    result = conversation(seed)
    opts = CaptionOptions(chars_per_caption=chars)
    for cues in rendered(result, opts):
        check_invariants(result, cues, opts)
        # Turns do not overlap here, so the cues read as the transcript.
        assert " ".join(c.text for c in cues) == result.text
    if chars == 200:
        assert len(cues) < 20


def test_reading_conventions_where_silence_allows() -> None:
    result = conversation(3)
    opts = CaptionOptions()
    cues = build_cues(result, opts)
    for cue, nxt in zip(cues, [*cues[1:], None]):
        room = (nxt.start if nxt else float("inf")) - cue.start
        needed = max(opts.min_duration_s, len(cue.text) / opts.max_chars_per_s)
        duration = cue.end - cue.start
        # Either the cue meets the reading conventions, or it was stopped by the next cue,
        # or by the duration cap.
        assert (duration >= needed - 1e-9 or duration == pytest.approx(room)
                or duration == pytest.approx(opts.max_duration_s))
        assert nxt is None or cue.end <= nxt.start + 1e-9 or cue.speaker != nxt.speaker


def test_short_word_extended_into_silence() -> None:
    result = transcript([("yes", 1.0, 1.2, "speaker_0"), ("okay", 5.0, 5.3, "speaker_1")])
    (a, b), _ = rendered(result, CaptionOptions())
    assert (a.start, a.end) == (1.0, 2.0)
    assert (b.start, b.end) == (5.0, 6.0)


def test_extension_stops_at_next_cue() -> None:
    result = transcript([("absolutely", 1.0, 1.2, "speaker_0"), ("no", 1.5, 1.6, "speaker_1")])
    a, b = build_cues(result)
    assert a.end == 1.5 and b.start == 1.5


def test_fast_speech_gets_reading_time() -> None:
    words = [(w, 0.1 * i, 0.1 * i + 0.09, "speaker_0") for i, w in
             enumerate("we should probably schedule it".split())]
    (cue,) = build_cues(transcript(words), CaptionOptions(chars_per_caption=42))
    assert cue.end - cue.start == pytest.approx(len(cue.text) / 20.0)


def test_long_word_gets_own_cue() -> None:
    long = "supercalifragilisticexpialidocious"
    result = transcript([("a", 0.0, 0.2, "speaker_0"), (long, 0.3, 1.5, "speaker_0"),
                         ("b", 1.6, 1.8, "speaker_0")])
    opts = CaptionOptions(chars_per_caption=10)
    for cues in rendered(result, opts):
        assert [c.text for c in cues] == ["a", long, "b"]
        check_invariants(result, cues, opts)


def test_speaker_change_starts_a_cue() -> None:
    result = transcript([(w, i * 0.4, i * 0.4 + 0.3, f"speaker_{i % 2}")
                         for i, w in enumerate("one two three four five six".split())])
    for cues in rendered(result, CaptionOptions(chars_per_caption=200)):
        assert [(c.speaker, c.text) for c in cues] == [
            ("speaker_0", "one"), ("speaker_1", "two"), ("speaker_0", "three"),
            ("speaker_1", "four"), ("speaker_0", "five"), ("speaker_1", "six")]


def test_long_pause_and_duration_split() -> None:
    words = [("hello", 0.0, 0.4, "speaker_0"), ("there", 3.0, 3.4, "speaker_0")]
    assert [c.text for c in build_cues(transcript(words))] == ["hello", "there"]
    steady = [("go", i * 0.5, i * 0.5 + 0.4, "speaker_0") for i in range(30)]
    cues = build_cues(transcript(steady), CaptionOptions(chars_per_caption=200))
    assert len(cues) > 1
    assert all(c.end - c.start <= 7.0 for c in cues)


def test_overlapping_speakers() -> None:
    # speaker_1 says "right" while speaker_0 is still talking.
    a = [Word(text=t, start=s, end=s + 0.3, speaker="speaker_0")
         for t, s in [("so", 0.0), ("the", 0.4), ("plan", 0.8), ("works", 1.2)]]
    b = [Word(text="right", start=0.7, end=1.0, speaker="speaker_1")]
    words = sorted(a + b, key=lambda w: w.start)
    result = TranscriptResult(
        text=" ".join(w.text for w in words), words=words,
        utterances=[Utterance(speaker="speaker_0", start=0.0, end=1.5, text="so the plan works",
                              words=a),
                    Utterance(speaker="speaker_1", start=0.7, end=1.0, text="right", words=b)])
    for cues in rendered(result, CaptionOptions()):
        assert [(c.speaker, c.text) for c in cues] == [("speaker_0", "so the plan works"),
                                                        ("speaker_1", "right")]
        assert cues[0].end > cues[1].start  # overlapping speech, overlapping cues
        check_invariants(result, cues, CaptionOptions())


def test_words_without_utterances() -> None:
    result = conversation(5)
    bare = TranscriptResult(text=result.text, words=result.words)
    assert render_srt(bare) == render_srt(result)


def test_timestamps_and_escaping() -> None:
    result = transcript([("r&d", 3725.5, 3726.0, "speaker_3"), ("<b>", 3726.1, 3726.4,
                                                                 "speaker_3")])
    assert "01:02:05,500 --> " in render_srt(result)
    vtt_text = render_vtt(result)
    assert "01:02:05.500 --> " in vtt_text
    assert "[speaker_3] r&amp;d &lt;b&gt;" in vtt_text
    assert "[speaker_3] r&d <b>" in render_srt(result)


@pytest.mark.parametrize("chars", [9, 201, 0])
def test_caption_option_bounds(chars: int) -> None:
    with pytest.raises(pydantic.ValidationError):
        CaptionOptions(chars_per_caption=chars)


def test_options_frozen_and_consistent() -> None:
    opts = CaptionOptions()
    with pytest.raises(pydantic.ValidationError):
        opts.chars_per_caption = 50
    with pytest.raises(pydantic.ValidationError):
        CaptionOptions(min_duration_s=8.0, max_duration_s=7.0)
