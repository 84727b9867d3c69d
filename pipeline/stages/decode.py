"""decode: fetch the audio (upload or ``audio_url``), decode it to 16 kHz mono PCM, report
its duration to the accounts agent (which then admits or refuses it against the quota).

A multichannel job decodes each channel to its own PCM file (``audio-<n>.pcm``), at most
``MAX_CHANNELS`` of them, and reports their number with the duration."""

from __future__ import annotations

import contextlib
import logging
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal

from schemas.errors import JobErrorCode, JobFailed
from schemas.records import Dispatch, DurationKnown, JobSpec
from schemas.settings import Settings
from stores.objects import ObjectMissing
from topologies.objects import JobFiles, upload_key
from topologies.topics import ACCOUNT_EVENTS

from .common import stored
from .ports import Fetch, Ports

__all__ = ["MAX_CHANNELS", "DecodePlan", "plan_decode", "check_channels", "run", "url_fetcher"]

log = logging.getLogger("a5s.pipeline")

MAX_CHANNELS = 8
"""Channels a multichannel job may have: each is recognised on its own, so a job costs
(and is billed) its duration once per channel, and holds one processing slot meanwhile.
Eight covers a call (2), a podcast or court recorder's tracks (2 to 4) and 7.1 audio;
speech with more channels is rare (a studio session's tracks), and its cost (one job
billed sixteen times its length) would surprise a client more than the refusal."""


@dataclass(frozen=True)
class DecodePlan:
    action: Literal["drop", "reuse", "decode"]
    duration: float | None = None
    """The stored duration, when a replay finds the audio decoded already."""
    channels: int | None = None
    """The stored channel count of a multichannel job decoded already."""


def plan_decode(canceled: bool, spec: JobSpec | None, stored_duration: bytes | None,
                stored_channels: bytes | None = None) -> DecodePlan:
    """Canceled or deleted (no spec): drop. Decoded already (a replay): report it again."""
    if canceled:
        return DecodePlan("drop")
    if spec is None:
        return DecodePlan("drop")
    if stored_duration is not None and not spec.multichannel:
        return DecodePlan("reuse", float(stored_duration))
    if stored_duration is not None and stored_channels is not None:
        return DecodePlan("reuse", float(stored_duration), int(stored_channels))
    return DecodePlan("decode")


def check_channels(channels: int, limit: int = MAX_CHANNELS) -> None:
    """Raises ``JobFailed`` (``invalid_audio``) for a multichannel job with too many channels."""
    if channels > limit:
        raise JobFailed(JobErrorCode.invalid_audio,
                        f"The audio has {channels} channels; multichannel transcription takes "
                        f"at most {limit} (each channel is transcribed and billed on its own). "
                        "Mix the audio down to fewer channels, or send it without multichannel "
                        "to have it mixed to one and diarized.")


async def run(ports: Ports, job: Dispatch) -> None:
    tid, files = job.transcript_id, JobFiles(job.transcript_id)
    canceled = await ports.flags.is_canceled(tid)
    spec = None if canceled else await _spec(ports, files)
    done = None if spec is None else await stored(ports, files.duration)
    counted = None if spec is None or not spec.multichannel else await stored(ports,
                                                                               files.channels)
    plan = plan_decode(canceled, spec, done, counted)
    if plan.action == "drop":
        if not canceled:
            log.info("decode %s: job spec gone (deleted); dropping", tid)
        return
    channels = plan.channels
    if plan.action == "reuse":
        duration = plan.duration or 0.0
    else:
        assert spec is not None
        max_s = float(ports.settings.limits.max_audio_duration_seconds)
        async with _source(ports, spec) as src:
            if spec.multichannel:
                duration, channels = await _decode_channels(ports, files, src, max_s)
            else:
                async with ports.objects.writer(files.audio) as dst:
                    duration = await ports.models.run(ports.models.decode, src, dst, max_s)
        await ports.objects.put_bytes(files.duration, str(duration).encode())
        log.info("decode %s: %.2f s of audio%s", tid, duration,
                 f" on {channels} channel(s)" if channels else "")
    await ports.publish(ACCOUNT_EVENTS, job.account_id, DurationKnown(
        account_id=job.account_id, transcript_id=tid, duration=duration, channels=channels))


async def _decode_channels(ports: Ports, files: JobFiles, src: Path,
                           max_s: float) -> tuple[float, int]:
    """Each channel to its own file; the count is stored before the duration (which marks
    the stage done), so a replay that finds the duration finds the count too."""
    channels = await ports.models.run(ports.models.channels, src)
    check_channels(channels)
    async with contextlib.AsyncExitStack() as stack:
        dsts = [await stack.enter_async_context(ports.objects.writer(files.channel_audio(n)))
                for n in range(1, channels + 1)]
        duration = await ports.models.run(ports.models.decode_channels, src, dsts, max_s)
    await ports.objects.put_bytes(files.channels, str(channels).encode())
    return duration, channels


async def _spec(ports: Ports, files: JobFiles) -> JobSpec | None:
    raw = await stored(ports, files.spec)
    return None if raw is None else JobSpec.model_validate_json(raw)


@contextlib.asynccontextmanager
async def _source(ports: Ports, spec: JobSpec) -> AsyncIterator[Path]:
    if spec.file_id is not None:
        try:
            async with ports.objects.local_copy(upload_key(spec.file_id)) as path:
                yield path
        except ObjectMissing as exc:
            raise JobFailed(JobErrorCode.file_not_found,
                            "The uploaded file is missing or expired.") from exc
        return
    with tempfile.TemporaryDirectory(prefix="a5s-dl-") as tmp:
        path = Path(tmp) / "audio"
        with open(path, "wb") as fh:
            await ports.fetch(spec.audio_url or "", fh)
        yield path


def url_fetcher(settings: Settings) -> Fetch:
    """The worker's ``audio_url`` download: SSRF-guarded, size- and time-bounded."""
    from security.addresses import AddressPolicy

    from ..downloads import download
    allow = settings.allow_private_audio_urls
    policy = AddressPolicy(allow_private=allow, allow_loopback=allow)

    async def fetch(url: str, fh: IO[bytes]) -> None:
        await download(url, fh, policy=policy, max_bytes=settings.max_download_bytes,
                       timeout_s=settings.download_timeout_s)

    return fetch
