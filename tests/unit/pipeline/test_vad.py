"""Speech regions from Silero VAD over PCM files, and the chunk plan for the recogniser."""

from __future__ import annotations

from pathlib import Path

import pydantic
import pytest

from pipeline.audio import decode_to_pcm
from pipeline.types import Region
from pipeline.vad import SileroVad, VadOptions, plan_chunks, speech_regions

from asr_support import EVAL, JFK, SIGNAL


def to_pcm(src: Path, tmp_path: Path) -> Path:
    pcm = tmp_path / f"{src.stem}.pcm"
    with pcm.open("wb") as out:
        decode_to_pcm(src, out)
    return pcm


def assert_ordered(regions: list[Region], duration: float) -> None:
    for r in regions:
        assert 0 <= r.start < r.end <= duration + 1e-6
    for a, b in zip(regions, regions[1:]):
        assert a.end <= b.start


def test_jfk_speech_is_found(tmp_path: Path, vad_model: SileroVad) -> None:
    regions = speech_regions(to_pcm(JFK, tmp_path), VadOptions(), vad_model)
    assert regions
    assert_ordered(regions, 11.0)
    assert regions[0].start < 0.5 and regions[-1].end > 10.0
    assert sum(r.duration for r in regions) > 8.0


def test_leading_silence_is_skipped(tmp_path: Path, vad_model: SileroVad) -> None:
    regions = speech_regions(to_pcm(SIGNAL / "jfk_with_30s_leading_silence.wav", tmp_path),
                             VadOptions(), vad_model)
    assert regions and regions[0].start >= 29.5


@pytest.mark.parametrize("name", ["silence_digital_10s.wav", "silence_noise_floor_-60dBFS_10s.wav",
                                  "pink_noise_only_10s.wav", "tone_1khz_5s.wav"])
def test_no_speech_in_silence_noise_or_tone(name: str, tmp_path: Path,
                                            vad_model: SileroVad) -> None:
    assert speech_regions(to_pcm(SIGNAL / name, tmp_path), VadOptions(), vad_model) == []


def test_block_size_does_not_change_the_result(tmp_path: Path, vad_model: SileroVad) -> None:
    """The model state carries across blocks, so streaming in small blocks is exact."""
    pcm = to_pcm(EVAL / "synthetic" / "conv01_support_call.wav", tmp_path)
    whole = speech_regions(pcm, VadOptions(), vad_model)
    small = speech_regions(pcm, VadOptions(block_frames=7), vad_model)
    assert small == whole and len(whole) > 3


def test_long_speech_is_split(tmp_path: Path, vad_model: SileroVad) -> None:
    pcm = to_pcm(EVAL / "synthetic" / "conv02_team_meeting.wav", tmp_path)
    regions = speech_regions(pcm, VadOptions(max_speech_s=5, min_silence_ms=2000), vad_model)
    assert_ordered(regions, 97.0)
    assert max(r.duration for r in regions) <= 5.0 + 1e-6
    assert sum(r.duration for r in regions) > 60


def test_empty_file_has_no_regions(tmp_path: Path, vad_model: SileroVad) -> None:
    pcm = tmp_path / "empty.pcm"
    pcm.write_bytes(b"")
    assert speech_regions(pcm, VadOptions(), vad_model) == []


def test_plan_chunks_merges_near_regions_within_the_limit() -> None:
    opts = VadOptions(max_chunk_s=30, max_merge_gap_s=3)
    regions = [Region(0.5, 4.0), Region(5.0, 12.0), Region(13.0, 29.0), Region(29.5, 33.0),
               Region(40.0, 42.0), Region(43.0, 45.0)]
    # (29.5, 33) would make the first chunk 32.5 s; (40, 42) is 7 s after the chunk before it
    assert plan_chunks(regions, opts) == [Region(0.5, 29.0), Region(29.5, 33.0), Region(40.0, 45.0)]


def test_plan_chunks_splits_long_regions() -> None:
    chunks = plan_chunks([Region(10.0, 80.0)], VadOptions(max_chunk_s=30))
    assert len(chunks) == 3
    assert chunks[0].start == 10.0 and chunks[-1].end == 80.0
    assert all(c.duration <= 30 for c in chunks)
    assert all(a.end == b.start for a, b in zip(chunks, chunks[1:]))
    assert plan_chunks([], VadOptions()) == []


def test_options_are_frozen_and_validated() -> None:
    opts = VadOptions()
    with pytest.raises(pydantic.ValidationError):
        opts.threshold = 0.9  # type: ignore[misc]
    with pytest.raises(pydantic.ValidationError):
        VadOptions(max_chunk_s=45)
