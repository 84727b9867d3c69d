"""Many voices in one recording: the speaker count holds with nineteen people.

The recording is ``evaluation.diarization.build_conversation`` (the bench's ``--long``
builder) at 420 s: every single-speaker voice of the eval set on stage at once, two
synthetic conversations and an AMI excerpt between their turns, some turns overlapping;
19 voices with 6-44 s of speech each. It is read through the service's memory map after
the service's VAD, as the stage reads a job's audio. Diarizing it takes about 40 s of one
core's time on the development machine (more when it is busy).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluation.diarization import build_conversation, der_counts, voice_clips
from pipeline.diarization import DiarizationOptions, Diarizer, SpeakerEmbedder
from pipeline.engines import PcmSamples
from pipeline.vad import SileroVad, VadOptions, speech_regions

EVAL = Path(__file__).parents[3].parent / "shared" / "eval"
STEMS = ["synthetic/conv01_support_call", "synthetic/conv02_team_meeting",
         "real/pyannote_ami/dev00"]


@pytest.fixture(scope="module")
def conversation(tmp_path_factory: pytest.TempPathFactory):
    pcm = tmp_path_factory.mktemp("voices") / "conversation.pcm"
    ref = build_conversation(EVAL, 420.0, pcm, cast=len(voice_clips(EVAL)), item_every=8,
                             stems=STEMS)
    return pcm, ref


def test_the_conversation_is_deterministic_and_has_many_voices(conversation, tmp_path) -> None:
    pcm, ref = conversation
    again = build_conversation(EVAL, 420.0, tmp_path / "again.pcm",
                               cast=len(voice_clips(EVAL)), item_every=8, stems=STEMS)
    assert again == ref
    assert (tmp_path / "again.pcm").read_bytes() == pcm.read_bytes()
    speech: dict[str, float] = {}
    for voice, start, end in ref:
        assert 0 <= start < end <= 420.0
        speech[voice] = speech.get(voice, 0.0) + end - start
    assert len(speech) >= 18, sorted(speech)
    assert min(speech.values()) >= 5.0, speech


def test_nineteen_voices_are_counted_within_two(conversation) -> None:
    pcm, ref = conversation
    truth = len({voice for voice, _, _ in ref})
    speech = speech_regions(pcm, VadOptions(), SileroVad())
    with PcmSamples(pcm) as samples:
        turns = Diarizer(SpeakerEmbedder(), DiarizationOptions()).diarize(
            samples, speech)  # type: ignore[arg-type]
    found = len({t.speaker for t in turns})
    assert abs(found - truth) <= 2, (found, truth)
    c = der_counts(ref, turns, 420.0)
    assert (c["miss"] + c["fa"] + c["conf"]) / c["ref"] < 0.3, c
