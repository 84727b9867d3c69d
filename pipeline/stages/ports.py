"""What a stage may touch: the object store, transcripts, its node's publish, flags, models.

The worker passes the real stores (``stores.objects``, ``stores.transcripts``,
``stores.redis``) and the loaded ``Engines``; unit tests pass in-memory ones.
``publish`` is bound to the stage's graph node, so a stage cannot write a topic its
node does not declare.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any, Protocol

from schemas.records import TranscriptResult
from schemas.rows import TranscriptRow, UsageEventRow
from schemas.settings import Settings
from stores.objects import ObjectInfo
from topologies.topics import TopicSpec

__all__ = ["Ports", "Publish", "Fetch", "Objects", "TranscriptStore", "Flags", "Models"]

Publish = Callable[[TopicSpec[Any], str, Any], Awaitable[None]]
Fetch = Callable[[str, IO[bytes]], Awaitable[None]]
"""Downloads an ``audio_url`` into an open file (the SSRF-guarded client in the worker)."""


class Objects(Protocol):
    async def put_bytes(self, key: str, data: bytes) -> None: ...
    async def get_bytes(self, key: str) -> bytes: ...
    def local_copy(self, key: str) -> contextlib.AbstractAsyncContextManager[Path]: ...
    def writer(self, key: str) -> contextlib.AbstractAsyncContextManager[IO[bytes]]: ...
    async def exists(self, key: str) -> bool: ...
    async def delete(self, key: str) -> None: ...
    async def list(self, prefix: str) -> list[ObjectInfo]: ...


class TranscriptStore(Protocol):
    async def get(self, transcript_id: str, account_id: str | None = None,
                  *, include_deleted: bool = False) -> TranscriptRow | None: ...
    async def change(self, transcript_id: str, status: str, at: datetime | None = None,
                     **kwargs: Any) -> TranscriptRow | None: ...
    async def save_result(self, row: TranscriptRow, result: TranscriptResult) -> None: ...
    async def result(self, transcript_id: str, account_id: str) -> TranscriptResult | None: ...
    async def record_usage(self, event: UsageEventRow) -> None: ...


class Flags(Protocol):
    async def is_canceled(self, transcript_id: str) -> bool: ...


class Models(Protocol):
    """The model work (``pipeline.engines.Engines``): ``run`` puts a call on a worker pool."""

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any: ...
    def decode(self, src: Path, dst: IO[bytes], max_duration_s: float) -> float: ...
    def channels(self, src: Path) -> int: ...
    def decode_channels(self, src: Path, dsts: list[IO[bytes]], max_duration_s: float) -> float: ...
    def speech(self, pcm: Path) -> Any: ...
    async def transcribe(self, pcm: Path, chunks: list[Any]) -> Any: ...
    def diarize(self, pcm: Path, speech: Any, words: Any, speakers: Any) -> Any: ...
    def channel_result(self, speech: Any, words: Any, channels: int) -> Any: ...


@dataclass(frozen=True)
class Ports:
    objects: Objects
    transcripts: TranscriptStore
    publish: Publish
    flags: Flags
    models: Models
    settings: Settings
    fetch: Fetch
