"""Subtitles of a real completed transcript (two speakers), checked by real SRT and WebVTT parsers."""

from __future__ import annotations

import io
import re

import pytest
import srt
import webvtt

from ops.stack import EvalServer, Stack

pytestmark = pytest.mark.stack
CONVERSATION = "synthetic/conv01_support_call.wav"
LABEL = re.compile(r"^\[(speaker_\d+)\] (.+)$", re.S)


@pytest.fixture(scope="module")
def completed(stack: Stack, eval_server: EvalServer) -> tuple[Stack, str, dict]:
    _, key = stack.new_account()
    with stack.client(key) as client:
        tid = client.post("/v1/transcripts",
                          json={"audio_url": eval_server.url(CONVERSATION)}).json()["id"]
        done = stack.wait_transcript(client, tid)
    assert done["status"] == "completed", done
    assert len(done["speakers"]) == 2
    return stack, key, done


def _words(text: str) -> list[str]:
    return text.split()


@pytest.mark.parametrize("limit", [10, 32, 42, 200])
def test_srt_parses_and_respects_caption_length(completed, limit: int) -> None:
    stack, key, done = completed
    with stack.client(key) as client:
        resp = client.get(f"/v1/transcripts/{done['id']}/subtitles",
                          params={"format": "srt", "chars_per_caption": limit})
    assert resp.status_code == 200 and resp.headers["content-type"] == "application/x-subrip"
    cues = list(srt.parse(resp.text))
    assert cues, "a two-minute conversation has captions"
    spoken: list[str] = []
    for index, cue in enumerate(cues, 1):
        assert cue.index == index
        match = LABEL.match(cue.content)
        assert match, cue.content  # one speaker label per cue: speakers never mix
        text = match.group(2)
        assert len(text) <= limit or " " not in text, (limit, text)
        duration = (cue.end - cue.start).total_seconds()
        assert 0 < duration <= 7.0 + 1e-6
        spoken += _words(text)
    starts = [c.start for c in cues]
    assert starts == sorted(starts)
    # Every word of the transcript appears once, in order, and no word is split.
    assert spoken == [w["text"] for w in done["words"]]


def test_vtt_parses_with_speaker_labels(completed) -> None:
    stack, key, done = completed
    with stack.client(key) as client:
        resp = client.get(f"/v1/transcripts/{done['id']}/subtitles",
                          params={"format": "vtt", "chars_per_caption": 32})
    assert resp.status_code == 200 and resp.headers["content-type"] == "text/vtt"
    captions = webvtt.read_buffer(io.StringIO(resp.text))
    labels, spoken = [], []
    for caption in captions:
        match = LABEL.match(caption.text)
        assert match, caption.text
        labels.append(match.group(1))
        assert len(match.group(2)) <= 32 or " " not in match.group(2)
        spoken += _words(match.group(2))
    assert set(labels) == {s["id"] for s in done["speakers"]}
    assert labels[0] == "speaker_1", "speakers are numbered by first speech"
    assert spoken == [w["text"] for w in done["words"]]
