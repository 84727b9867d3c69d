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


def test_one_voice_heard_as_two_in_a_few_windows_is_one_speaker() -> None:
    """Over a long file the segmentation hears one voice as two local speakers here and
    there: two clusters as alike as one voice's parts merge when they were heard apart in
    most of their windows, and stay two when heard together in most (two people)."""
    import numpy as np

    from pipeline.diarization.clustering import cluster_embeddings

    rng = np.random.default_rng(4)
    voice = rng.normal(size=32)
    x = voice + rng.normal(size=(40, 32)) * 0.3
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    seconds = np.full(40, 1.0)
    opts = DiarizationOptions()
    # rows 0-19 and 20-39 kept apart by one shared window (rows 0 and 20) only
    windows = np.concatenate([np.arange(20), np.arange(20) + 19])
    windows[20] = 0
    assert set(cluster_embeddings(x, seconds, opts, windows).tolist()) == {0}
    # heard together in every window: two speakers, however alike
    together = np.concatenate([np.arange(20), np.arange(20)])
    labels = cluster_embeddings(x, seconds, opts, together)
    assert labels[0] != labels[20] and len(set(labels.tolist())) == 2
    # and without the guard giving way (1: never), the one shared window keeps them apart
    labels = cluster_embeddings(x, seconds, opts.model_copy(update={"same_similarity": 1.0}),
                                windows)
    assert len(set(labels.tolist())) == 2
