"""Speaker-count bounds on real voices: the number the clustering estimates, clipped into a
job's [min, max] (``SpeakerCount``; ``/v2``'s ``speaker_options``), first on embeddings of
eval voices, then through the whole diarizer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from asr_support import EVAL
from pipeline.audio import decode_to_pcm, read_pcm
from pipeline.diarization import (DiarizationOptions, Diarizer, SpeakerEmbedder,
                                  cluster_embeddings)
from pipeline.types import SAMPLE_RATE, Region
from pipeline.vad import SileroVad, VadOptions, speech_regions
from schemas.records import SpeakerCount

VOICES = [  # four people, one eval item each
    "real/whisper/jfk.flac",
    "real/speechbrain/LJ050-0131.wav",
    "real/pocketsphinx/librivox/sense_and_sensibility_01_austen_64kb-0870.wav",
    "real/asterisk_16k/demo-congrats.wav",
]
MEETING = "synthetic/conv02_team_meeting.wav"  # three voices
ONE_VOICE = "real/asterisk_16k/priv-callee-options.wav"  # 31 s, one voice
PIECE = 1.5  # s of speech per embedding


@pytest.fixture(scope="module")
def decoded(tmp_path_factory: pytest.TempPathFactory, vad_model: SileroVad):
    """Samples and VAD speech regions of an eval item, as the service finds them."""
    cache: dict[str, tuple[np.ndarray, list[Region]]] = {}
    root = tmp_path_factory.mktemp("bounds")

    def run(name: str) -> tuple[np.ndarray, list[Region]]:
        if name not in cache:
            if not (EVAL / name).is_file():
                pytest.fail(f"eval audio not found: {EVAL / name}")
            pcm = root / f"{Path(name).stem}.pcm"
            with pcm.open("wb") as out:
                decode_to_pcm(EVAL / name, out)
            cache[name] = read_pcm(pcm), speech_regions(pcm, VadOptions(), vad_model)
        return cache[name]

    return run


def _pieces(audio: np.ndarray, speech: list[Region]) -> list[np.ndarray]:
    size = int(PIECE * SAMPLE_RATE)
    out = []
    for r in speech:
        region = audio[int(r.start * SAMPLE_RATE):int(r.end * SAMPLE_RATE)]
        out += [region[i:i + size] for i in range(0, len(region) - size + 1, size)]
    return out


@pytest.fixture(scope="module")
def voices(decoded, embedder: SpeakerEmbedder) -> tuple[np.ndarray, np.ndarray]:
    """Unit embeddings of 1.5 s pieces of each voice's speech, and the voice of each."""
    rows, who = [], []
    for k, name in enumerate(VOICES):
        pieces = _pieces(*decoded(name))
        rows += [embedder.embed(p) for p in pieces]
        who += [k] * len(pieces)
    return np.stack(rows), np.array(who)


def _count(labels: np.ndarray) -> int:
    return len(set(labels.tolist()))


def test_bounds_clip_the_estimate_on_real_voices(voices) -> None:
    emb, who = voices
    seconds = np.full(len(emb), PIECE)
    opts = DiarizationOptions()

    def cluster(count: SpeakerCount | None) -> np.ndarray:
        return cluster_embeddings(emb, seconds, opts, speakers=count)

    free = cluster(None)
    assert _count(free) == len(VOICES)  # the estimate finds the four people
    within = cluster(SpeakerCount(at_least=2, at_most=6))
    assert (within == free).all()  # inside the bounds nothing changes
    capped = cluster(SpeakerCount(at_most=2))
    assert _count(capped) == 2
    for k in range(len(VOICES)):  # capping merges whole voices, it does not mix them
        mine = capped[who == k]
        assert np.bincount(mine).max() >= 0.8 * len(mine), VOICES[k]
    assert _count(cluster(SpeakerCount(at_least=5))) == 5
    assert _count(cluster(SpeakerCount(at_least=3, at_most=3))) == 3


def test_one_real_voice_stays_one_within_loose_bounds(voices) -> None:
    emb, who = voices
    one = emb[who == VOICES.index("real/asterisk_16k/demo-congrats.wav")]
    labels = cluster_embeddings(one, np.full(len(one), PIECE), DiarizationOptions(),
                                speakers=SpeakerCount(at_least=1, at_most=3))
    assert len(one) >= 10 and _count(labels) == 1


def _speakers(diarizer: Diarizer, decoded, name: str, count: SpeakerCount | None) -> int:
    audio, speech = decoded(name)
    return len({t.speaker for t in diarizer.diarize(audio, speech, count)})


def test_bounds_through_the_diarizer_on_a_meeting(diarizer: Diarizer, decoded) -> None:
    """conv02 has three voices: a maximum below that caps the count, a minimum above it
    raises it (bounds around it change nothing: the first test)."""
    assert _speakers(diarizer, decoded, MEETING, None) == 3
    assert _speakers(diarizer, decoded, MEETING, SpeakerCount(at_most=2)) == 2
    assert _speakers(diarizer, decoded, MEETING, SpeakerCount(at_least=4)) == 4


def test_one_voice_through_the_diarizer(diarizer: Diarizer, decoded) -> None:
    """Bounds that allow one speaker keep one voice one; an exact count of two is taken
    as given (as AssemblyAI's speakers_expected: for a client that knows the number)."""
    assert _speakers(diarizer, decoded, ONE_VOICE, SpeakerCount(at_least=1, at_most=3)) == 1
    assert _speakers(diarizer, decoded, ONE_VOICE, None) == 1
    assert _speakers(diarizer, decoded, ONE_VOICE, SpeakerCount.exactly(2)) == 2
