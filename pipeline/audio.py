"""Decode any audio or video file to the pipeline's raw PCM form, and read it back.

The pipeline keeps one canonical copy of each job's audio: 16 kHz mono signed
16-bit little-endian samples with no header (half the size of float32, and any
span can be memory-mapped); a multichannel job keeps one such file per channel
(:func:`decode_channels_to_pcm`). Decoding uses PyAV, whose wheel carries FFmpeg, so
no system FFmpeg is needed. Decoding streams frame by frame: memory use does not
grow with the file's length, and a file over the duration limit stops decoding
as soon as the limit is passed.

Failures are job errors: anything FFmpeg cannot open or decode, a file without
an audio stream, or one shorter than :data:`MIN_DURATION_S` raises
:class:`~schemas.errors.JobFailed` with ``invalid_audio``; one longer than the
limit raises ``audio_too_long``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

import av
import numpy as np

from schemas.errors import JobErrorCode, JobFailed

from .types import SAMPLE_RATE, Region

__all__ = ["MIN_DURATION_S", "MAX_DURATION_S", "PCM_DTYPE", "decode_to_pcm",
           "audio_channels", "decode_channels_to_pcm", "read_pcm", "pcm_duration"]

log = logging.getLogger(__name__)

MIN_DURATION_S = 0.1
"""Shorter audio is ``invalid_audio`` (spec section 7)."""

MAX_DURATION_S = 36000.0
"""Default limit: 10 hours (spec section 7, ``audio_too_long``)."""

PCM_DTYPE = np.dtype("<i2")
"""Sample type of the raw PCM files the pipeline writes and reads."""

_DC_POLE = 0.995
"""Pole of the DC-blocking high-pass filter: about 13 Hz at 16 kHz, below any voice."""
_DC_BLOCK = 2048
"""Samples the DC blocker sums at once (see :class:`_DcBlocker`)."""
_DC_GROW = _DC_POLE ** np.arange(_DC_BLOCK, dtype=np.float64)
"""``p^n`` across a block, shared by every decode."""
_DC_SHRINK = 1.0 / _DC_GROW
"""``p^-k`` across a block."""

_ANTIPHASE_RATIO = 10.0
"""Side (L-R) energy this many times the mid (L+R) energy means the channels cancel."""

_MIX_TIME_CONSTANT_S = 2.0
"""Memory of the channel-energy estimate that picks the stereo mix."""

_SILENT_ENERGY = 1e-8
"""Mean-square level (about -80 dBFS) below which the stereo mix is left as it is."""


@contextmanager
def _map_av_errors(what: str) -> Iterator[None]:
    """Translate PyAV/FFmpeg errors into the job error a client sees."""
    try:
        yield
    except av.error.FFmpegError as exc:
        raise JobFailed(JobErrorCode.invalid_audio,
                        f"The audio could not be {what}: it is not a supported audio or video "
                        f"file, or it is damaged ({exc.strerror or exc}).") from exc


class _StereoMixer:
    """Mixes two channels to one without losing anti-phase recordings.

    A plain (L+R)/2 cancels a recording whose channels are inverted copies of
    each other. The mixer tracks the energy of the sum and of the difference with
    a slowly decaying average, and outputs the difference while it carries far
    more energy than the sum. Switching needs a large, sustained imbalance, so
    ordinary stereo (two speakers, one per channel, or one silent channel) stays
    on the sum.
    """

    def __init__(self) -> None:
        self._mid_energy = 0.0
        self._side_energy = 0.0
        self._use_side = False

    def mix(self, planes: np.ndarray) -> np.ndarray:
        left, right = planes[0], planes[1]
        mid = (left + right) * 0.5
        side = (left - right) * 0.5
        n = mid.shape[0]
        if n == 0:
            return mid
        keep = math.exp(-n / (_MIX_TIME_CONSTANT_S * SAMPLE_RATE))
        self._mid_energy = keep * self._mid_energy + (1 - keep) * float(np.mean(mid * mid))
        self._side_energy = keep * self._side_energy + (1 - keep) * float(np.mean(side * side))
        if self._side_energy > _SILENT_ENERGY:
            if not self._use_side and self._side_energy > _ANTIPHASE_RATIO * self._mid_energy:
                self._use_side = True
            elif self._use_side and self._mid_energy > self._side_energy:
                self._use_side = False
        return side if self._use_side else mid


class _DcBlocker:
    """One-pole high-pass filter, ``y[n] = x[n] - x[n-1] + p * y[n-1]``, that carries its
    state from frame to frame.

    Written out in numpy rather than with ``scipy.signal.lfilter``: that import alone took
    about 0.9 s of a start (the first job waits for it), and nothing else here needs it.
    Within a block the recursion is a scaled running sum, ``y[n] = p^n * (p * y[-1] +
    sum_k p^-k d[k])``; blocks of :data:`_DC_BLOCK` samples keep ``p^-k`` small enough
    (under 3e4) that the sum loses no precision a 16-bit sample could show.
    """

    def __init__(self) -> None:
        self._last_x: float | None = None
        self._last_y = 0.0

    def __call__(self, x: np.ndarray) -> np.ndarray:
        x = x.astype(np.float64)
        if not x.size:
            return x
        if self._last_x is None:
            # Start from the first sample's level so a constant offset gives no step.
            self._last_x = float(x[0])
        y = np.empty_like(x)
        for start in range(0, x.size, _DC_BLOCK):
            block = x[start:start + _DC_BLOCK]
            n = block.size
            step = np.diff(block, prepend=self._last_x)
            step[0] += _DC_POLE * self._last_y
            out = _DC_GROW[:n] * np.cumsum(step * _DC_SHRINK[:n])
            y[start:start + n] = out
            self._last_x, self._last_y = float(block[-1]), float(out[-1])
        return y


def _to_int16(x: np.ndarray) -> bytes:
    return np.clip(np.rint(x * 32768.0), -32768, 32767).astype(PCM_DTYPE).tobytes()


def decode_to_pcm(src: str | Path | BinaryIO, dst: BinaryIO, *,
                  max_duration_s: float = MAX_DURATION_S) -> float:
    """Decode the first audio stream of ``src`` to 16 kHz mono int16 LE PCM in ``dst``.

    Stereo is mixed with anti-phase detection; more channels use FFmpeg's
    downmix. A DC offset is filtered out. Undecodable packets in the middle of a
    file are skipped, and a file that ends early keeps the audio before the
    damage.

    Args:
        src: a path, or a binary file object positioned at the start of the file.
        dst: a writable binary file object; receives raw samples, no header.
        max_duration_s: longer audio fails with ``audio_too_long`` (seconds).

    Returns:
        The decoded duration in seconds.

    Raises:
        JobFailed: ``invalid_audio`` or ``audio_too_long``.
    """
    mixer, dc = _StereoMixer(), _DcBlocker()

    def write(planes: np.ndarray) -> None:
        dst.write(_to_int16(dc(mixer.mix(planes) if planes.shape[0] == 2 else planes[0])))

    return _decode(src, write, max_duration_s, separate=False)


def audio_channels(src: str | Path) -> int:
    """The number of channels of the first audio stream of ``src`` (its header only).

    Raises:
        JobFailed: ``invalid_audio`` when the file cannot be opened or has no audio stream.
    """
    with _map_av_errors("opened"):
        container = av.open(str(src), mode="r", metadata_errors="ignore")
    with container:
        if not container.streams.audio:
            raise JobFailed(JobErrorCode.invalid_audio, "The file has no audio stream.")
        return max(1, int(container.streams.audio[0].codec_context.channels))


def decode_channels_to_pcm(src: str | Path, dsts: Sequence[BinaryIO], *,
                           max_duration_s: float = MAX_DURATION_S) -> float:
    """Decode each channel of the first audio stream of ``src`` to its own 16 kHz mono
    int16 LE PCM file: channel ``n`` (1-based) goes to ``dsts[n - 1]``.

    The multichannel form of :func:`decode_to_pcm`: nothing is mixed, each channel has
    its own DC filter; damage, duration limits and errors are handled the same way.
    ``dsts`` has one file per channel, as :func:`audio_channels` counts them.

    Returns:
        The decoded duration in seconds (of each channel, not their sum).

    Raises:
        JobFailed: ``invalid_audio`` or ``audio_too_long``.
    """
    dcs = [_DcBlocker() for _ in dsts]

    def write(planes: np.ndarray) -> None:
        if planes.shape[0] != len(dsts):
            raise JobFailed(JobErrorCode.invalid_audio,
                            f"The audio has {planes.shape[0]} channels where its header "
                            f"declares {len(dsts)}.")
        for plane, dc, dst in zip(planes, dcs, dsts):
            dst.write(_to_int16(dc(plane)))

    return _decode(src, write, max_duration_s, separate=True)


def _decode(src: str | Path | BinaryIO, write: Callable[[np.ndarray], None],
            max_duration_s: float, *, separate: bool) -> float:
    """Decode the first audio stream of ``src`` into 16 kHz float planes (channels x
    samples) handed to ``write``: the stream's own channels when ``separate``, else
    mono or stereo for the mix. Returns the duration; raises the job errors."""
    max_samples = int(max_duration_s * SAMPLE_RATE)
    too_long = JobFailed(JobErrorCode.audio_too_long,
                         f"The audio is longer than the limit of {max_duration_s:g} seconds.")
    written = 0
    with _map_av_errors("opened"):
        container = av.open(str(src) if isinstance(src, Path) else src, mode="r",
                            metadata_errors="ignore")
    with container:
        if not container.streams.audio:
            raise JobFailed(JobErrorCode.invalid_audio, "The file has no audio stream.")
        stream = container.streams.audio[0]
        declared = _declared_duration(container, stream)
        if declared is not None and declared > max_duration_s + 1.0:
            raise too_long
        if separate:
            layout: Any = stream.codec_context.layout
        else:
            layout = "stereo" if stream.codec_context.channels == 2 else "mono"
        resampler = av.AudioResampler(format="fltp", layout=layout, rate=SAMPLE_RATE)
        for out in _resampled(resampler, _decoded_frames(container, stream)):
            planes = out.to_ndarray()
            written += planes.shape[1]
            if written > max_samples:
                raise too_long
            write(planes)
    duration = written / SAMPLE_RATE
    if written == 0:
        raise JobFailed(JobErrorCode.invalid_audio, "The file contains no audio samples.")
    if duration < MIN_DURATION_S:
        raise JobFailed(JobErrorCode.invalid_audio,
                        f"The audio is {duration:.3f} seconds long; the minimum is "
                        f"{MIN_DURATION_S:g} seconds.")
    return duration


def _declared_duration(container: av.container.InputContainer,
                       stream: av.audio.stream.AudioStream) -> float | None:
    """The duration the header claims, in seconds, if it claims one."""
    if stream.duration is not None and stream.time_base is not None:
        return float(stream.duration * stream.time_base)
    if container.duration is not None:
        return container.duration / av.time_base
    return None


def _decoded_frames(container: av.container.InputContainer,
                    stream: av.audio.stream.AudioStream) -> Iterator[av.AudioFrame]:
    """Decoded frames of ``stream``; damaged packets are skipped, a damaged tail ends the stream."""
    good = bad = 0
    packets = container.demux(stream)
    while True:
        try:
            packet = next(packets)
        except StopIteration:
            break
        except av.error.FFmpegError as exc:
            if good == 0:
                raise JobFailed(JobErrorCode.invalid_audio,
                                f"The audio could not be read: the file is damaged ({exc})."
                                ) from exc
            log.warning("audio container damaged after %d packets; keeping the audio before it: %s",
                        good, exc)
            break
        try:
            frames = packet.decode()
        except av.error.FFmpegError as exc:
            bad += 1
            if bad > max(16, good):
                raise JobFailed(JobErrorCode.invalid_audio,
                                "The audio could not be decoded: most of the stream is damaged."
                                ) from exc
            continue
        good += 1
        yield from frames


def _resampled(resampler: av.AudioResampler,
               frames: Iterator[av.AudioFrame]) -> Iterator[av.AudioFrame]:
    """16 kHz float frames, including what the resampler holds back until the end."""
    with _map_av_errors("decoded"):
        try:
            for frame in frames:
                yield from resampler.resample(frame)
            yield from resampler.resample(None)
        except ValueError as exc:  # a stream whose sample layout changes part-way
            raise JobFailed(JobErrorCode.invalid_audio,
                            "The audio could not be decoded: its format changes mid-stream "
                            f"({exc}).") from exc


def pcm_duration(path: str | Path) -> float:
    """Duration in seconds of a raw PCM file written by :func:`decode_to_pcm`."""
    return Path(path).stat().st_size // PCM_DTYPE.itemsize / SAMPLE_RATE


def read_pcm(path: str | Path, region: Region | None = None) -> np.ndarray:
    """Read a raw PCM file, or one region of it, as float32 in [-1, 1].

    The file is memory-mapped, so reading a region reads only that region.

    Args:
        path: a file written by :func:`decode_to_pcm`.
        region: the span to read in seconds (clamped to the file); ``None`` reads all.

    Returns:
        A new float32 array (not a view of the file).
    """
    size = Path(path).stat().st_size // PCM_DTYPE.itemsize
    start, end = 0, size
    if region is not None:
        start = min(size, max(0, round(region.start * SAMPLE_RATE)))
        end = min(size, max(start, round(region.end * SAMPLE_RATE)))
    if end <= start:
        return np.zeros(0, dtype=np.float32)
    samples = np.memmap(path, dtype=PCM_DTYPE, mode="r", offset=start * PCM_DTYPE.itemsize,
                        shape=(end - start,))
    try:
        return samples.astype(np.float32) / np.float32(32768.0)
    finally:
        del samples
