"""Decoding every odd input in the eval set, and reading PCM back."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest

from pipeline.audio import _DC_POLE, PCM_DTYPE, _DcBlocker, decode_to_pcm, pcm_duration, read_pcm
from pipeline.types import SAMPLE_RATE, Region
from schemas.errors import JobErrorCode, JobFailed

from asr_support import EVAL, SIGNAL

BAD = sorted(item["path"] for item in json.loads((EVAL / "manifest.json").read_text())["items"]
             if item["kind"] == "bad") if (EVAL / "manifest.json").is_file() else []
REF = EVAL / "bad" / "formats" / "jfk_16k_ref.wav"


def decode(src, **kwargs) -> tuple[float, np.ndarray]:
    out = io.BytesIO()
    duration = decode_to_pcm(src, out, **kwargs)
    return duration, np.frombuffer(out.getvalue(), dtype=PCM_DTYPE).astype(np.float32) / 32768


def rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(x * x)))


@pytest.fixture(scope="module")
def reference() -> np.ndarray:
    return decode(REF)[1]


@pytest.mark.parametrize("path", BAD)
def test_bad_inputs_behave_as_the_manifest_says(path: str, manifest: dict[str, dict]) -> None:
    item = manifest[path]
    expected = item["expected_behaviour"]
    if expected.startswith("error invalid_audio"):
        with pytest.raises(JobFailed) as failed:
            decode(EVAL / path)
        assert failed.value.code is JobErrorCode.invalid_audio
        assert failed.value.message
        return
    try:
        duration, samples = decode(EVAL / path)
    except JobFailed as exc:
        assert "or error invalid_audio" in expected, f"{path}: {exc}"
        assert exc.code is JobErrorCode.invalid_audio
        return
    assert samples.size == round(duration * SAMPLE_RATE)
    if "truncated" in path:  # the manifest gives the header's claim; the part present is shorter
        assert 0.1 <= duration <= item["duration"] + 0.1
    else:
        assert duration == pytest.approx(item["duration"], abs=0.1)


def test_file_object_source_matches_path(reference: np.ndarray) -> None:
    with REF.open("rb") as f:
        duration, samples = decode(f)
    assert duration == pytest.approx(11.0, abs=0.01)
    np.testing.assert_array_equal(samples, reference)


def test_headerless_pcm_from_file_object_is_invalid() -> None:
    raw = (EVAL / "bad" / "formats" / "jfk_16k_s16le.raw.pcm").read_bytes()
    with pytest.raises(JobFailed) as failed:
        decode(io.BytesIO(raw))
    assert failed.value.code is JobErrorCode.invalid_audio


def test_too_long_by_header_fails_before_writing() -> None:
    out = io.BytesIO()
    with pytest.raises(JobFailed) as failed:
        decode_to_pcm(REF, out, max_duration_s=5)
    assert failed.value.code is JobErrorCode.audio_too_long
    assert out.tell() == 0


def test_too_long_while_decoding_stops_at_the_limit() -> None:
    out = io.BytesIO()
    # the header's 11 s is within the 1 s slack, so decoding starts and must stop at the limit
    with pytest.raises(JobFailed) as failed:
        decode_to_pcm(REF, out, max_duration_s=10.5)
    assert failed.value.code is JobErrorCode.audio_too_long
    assert out.tell() <= 10.5 * SAMPLE_RATE * PCM_DTYPE.itemsize


@pytest.mark.parametrize("name", ["jfk_stereo_phase_inverted.wav", "jfk_stereo_right_only.wav",
                                  "jfk_stereo_dual_mono.wav"])
def test_stereo_mix_keeps_the_voice(name: str, reference: np.ndarray) -> None:
    _, samples = decode(SIGNAL / name)
    assert samples.size == reference.size
    assert rms(samples) > 0.3 * rms(reference)
    corr = abs(np.corrcoef(samples, reference)[0, 1])
    assert corr > 0.95


def test_dc_offset_is_removed(reference: np.ndarray) -> None:
    _, samples = decode(SIGNAL / "jfk_dc_offset.wav")
    assert abs(float(np.mean(samples))) < 1e-3
    assert abs(float(np.mean(samples[: SAMPLE_RATE // 2]))) < 0.02  # settles within the first words
    assert np.corrcoef(samples, reference)[0, 1] > 0.95


def test_dc_blocker_is_the_one_pole_filter_however_the_frames_fall() -> None:
    """The running-sum form gives what the recursion gives, to well under a 16-bit step,
    whether the signal comes in one piece, in frames of any size, or longer than a block."""
    from scipy.signal import lfilter  # the reference only; the service does not import it
    rng = np.random.default_rng(7)
    x = (0.1 * rng.standard_normal(3 * SAMPLE_RATE) + 0.3).astype(np.float32)
    # The state the blocker starts from: the first sample's level, so no step at the start.
    expected, _ = lfilter([1.0, -1.0], [1.0, -_DC_POLE], x.astype(np.float64),
                          zi=np.array([-float(x[0])]))
    whole = _DcBlocker()(x)
    blocker = _DcBlocker()
    cuts = np.sort(rng.choice(np.arange(1, x.size), 97, replace=False))
    framed = np.concatenate([blocker(part) for part in np.split(x, cuts)] + [blocker(x[:0])])
    for got in (whole, framed):
        assert got.shape == x.shape
        assert np.max(np.abs(got - expected)) < 1e-9
    assert np.array_equal(np.rint(whole * 32768), np.rint(expected * 32768))


@pytest.mark.parametrize("name", ["jfk_8k_telephone_ulaw.wav", "jfk_8k_telephone_alaw.wav"])
def test_telephone_audio_is_upsampled(name: str, reference: np.ndarray) -> None:
    duration, samples = decode(SIGNAL / name)
    assert duration == pytest.approx(11.0, abs=0.01)
    assert np.corrcoef(samples, reference)[0, 1] > 0.8


def test_read_pcm_region_and_duration(tmp_path: Path, reference: np.ndarray) -> None:
    pcm = tmp_path / "jfk.pcm"
    with pcm.open("wb") as out:
        decode_to_pcm(REF, out)
    assert pcm_duration(pcm) == pytest.approx(11.0)
    whole = read_pcm(pcm)
    assert whole.dtype == np.float32 and whole.size == 11 * SAMPLE_RATE
    np.testing.assert_array_equal(whole, reference)
    part = read_pcm(pcm, Region(2.0, 3.5))
    np.testing.assert_array_equal(part, whole[2 * SAMPLE_RATE:int(3.5 * SAMPLE_RATE)])
    assert read_pcm(pcm, Region(10.5, 99.0)).size == SAMPLE_RATE // 2
    assert read_pcm(pcm, Region(20.0, 30.0)).size == 0
    empty = tmp_path / "empty.pcm"
    empty.write_bytes(b"")
    assert read_pcm(empty).size == 0 and pcm_duration(empty) == 0
