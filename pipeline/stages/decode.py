"""decode: fetch the audio (upload or ``audio_url``), decode it to 16 kHz mono PCM, report
its duration to the accounts agent (which then admits or refuses it against the quota)."""

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

__all__ = ["DecodePlan", "plan_decode", "run", "url_fetcher"]

log = logging.getLogger("a5s.pipeline")


@dataclass(frozen=True)
class DecodePlan:
    action: Literal["drop", "reuse", "decode"]
    duration: float | None = None
    """The stored duration, when a replay finds the audio decoded already."""


def plan_decode(canceled: bool, spec: JobSpec | None, stored_duration: bytes | None) -> DecodePlan:
    """Canceled or deleted (no spec): drop. Decoded already (a replay): report it again."""
    if canceled:
        return DecodePlan("drop")
    if spec is None:
        return DecodePlan("drop")
    if stored_duration is not None:
        return DecodePlan("reuse", float(stored_duration))
    return DecodePlan("decode")


async def run(ports: Ports, job: Dispatch) -> None:
    tid, files = job.transcript_id, JobFiles(job.transcript_id)
    canceled = await ports.flags.is_canceled(tid)
    spec = None if canceled else await _spec(ports, files)
    done = None if spec is None else await stored(ports, files.duration)
    plan = plan_decode(canceled, spec, done)
    if plan.action == "drop":
        if not canceled:
            log.info("decode %s: job spec gone (deleted); dropping", tid)
        return
    if plan.action == "reuse":
        duration = plan.duration or 0.0
    else:
        assert spec is not None
        max_s = float(ports.settings.limits.max_audio_duration_seconds)
        async with _source(ports, spec) as src, ports.objects.writer(files.audio) as dst:
            duration = await ports.models.run(ports.models.decode, src, dst, max_s)
        await ports.objects.put_bytes(files.duration, str(duration).encode())
        log.info("decode %s: %.2f s of audio", tid, duration)
    await ports.publish(ACCOUNT_EVENTS, job.account_id, DurationKnown(
        account_id=job.account_id, transcript_id=tid, duration=duration))


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
