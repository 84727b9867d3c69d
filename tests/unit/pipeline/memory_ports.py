"""In-memory ports for driving one stage without a stack.

Objects go to a real ``FileStore`` in a temporary directory (it is a plain directory);
transcripts, flags and the publish sink are kept in memory. The models are stand-ins
(``FakeModels``): what a stage decides does not depend on what the models hear, and
the real models are exercised by the engine tests and the end-to-end suite. Each
stand-in counts its calls, so a test can prove a replay did not run a model again.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Callable

from pipeline.engines import AsrLayout
from pipeline.stages.ports import Ports
from pipeline.types import Region, TimedWord
from schemas.records import JobSpec, TranscriptResult
from schemas.rows import STATE_RANK, TranscriptRow, UsageEventRow
from schemas.settings import Settings
from stores.objects import FileStore
from topologies.graph import Node, node
from topologies.objects import JobFiles
from topologies.topics import TopicSpec

T0 = datetime(2026, 1, 1, tzinfo=UTC)


class MemoryTranscripts:
    """Transcript rows with the store's ordering rule: a later state is never undone."""

    def __init__(self) -> None:
        self.rows: dict[str, TranscriptRow] = {}
        self.results: dict[str, TranscriptResult] = {}
        self.usage: dict[str, UsageEventRow] = {}
        self.usage_writes = 0

    async def get(self, transcript_id: str, account_id: str | None = None, *,
                  include_deleted: bool = False) -> TranscriptRow | None:
        row = self.rows.get(transcript_id)
        if row is None or (account_id is not None and row.account_id != account_id):
            return None
        return row if include_deleted or not row.deleted else None

    async def change(self, transcript_id: str, status: str, at: datetime | None = None, *,
                     account_id: str | None = None, known: TranscriptRow | None = None,
                     **fields: Any) -> TranscriptRow | None:
        row = await self.get(transcript_id, account_id, include_deleted=True)
        if row is None or row.deleted:
            return None
        current = STATE_RANK.get(row.status, 0)
        if STATE_RANK[status] < current or (STATE_RANK[status] == current
                                            and status != row.status):
            return row
        at = at or datetime.now(UTC)
        update = dict(fields, status=status)
        if status in ("completed", "error"):
            update.setdefault("completed_at", row.completed_at or at)
        if status == "deleted":
            update["deleted"] = 1
        self.rows[transcript_id] = row.model_copy(update=update)
        return self.rows[transcript_id]

    async def save_result(self, row: TranscriptRow, result: TranscriptResult) -> None:
        self.results[row.id] = result

    async def result(self, transcript_id: str, account_id: str) -> TranscriptResult | None:
        return self.results.get(transcript_id)

    async def record_usage(self, event: UsageEventRow) -> None:
        self.usage_writes += 1
        self.usage[event.event_id] = event  # a ReplacingMergeTree keeps one per event id


class MemoryFlags:
    def __init__(self) -> None:
        self.canceled: set[str] = set()

    async def is_canceled(self, transcript_id: str) -> bool:
        return transcript_id in self.canceled


class FakeModels:
    """Stand-ins for ``pipeline.engines.Engines``, with a call count per model."""

    layout = AsrLayout("cpu", workers=2, threads=1, batch_size=1, stage_workers=2)

    def __init__(self, duration: float = 2.5) -> None:
        self.calls: Counter[str] = Counter()
        self.duration = duration
        self.audio_channels = 2
        self.result = TranscriptResult(text="hello world")
        self.hotwords: str | None = None

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        out = fn(*args)
        return await out if hasattr(out, "__await__") else out

    def decode(self, src: Path, dst: IO[bytes], max_duration_s: float) -> float:
        self.calls["decode"] += 1
        dst.write(Path(src).read_bytes())
        return self.duration

    def channels(self, src: Path) -> int:
        return self.audio_channels

    def decode_channels(self, src: Path, dsts: list[IO[bytes]], max_duration_s: float) -> float:
        """Channel n's audio is the source's bytes followed by n."""
        self.calls["decode_channels"] += 1
        for n, dst in enumerate(dsts, 1):
            dst.write(Path(src).read_bytes() + bytes([n]))
        return self.duration

    def speech(self, pcm: Path) -> tuple[list[Region], list[Region]]:
        self.calls["speech"] += 1
        return [Region(0.1, 1.0), Region(1.2, 2.4)], [Region(0.1, 2.4)]

    async def transcribe(self, pcm: Path, chunks: list[Region],
                         hotwords: str | None = None) -> list[TimedWord]:
        self.calls["transcribe"] += 1
        self.hotwords = hotwords
        return [TimedWord("hello", 0.1, 0.5), TimedWord("world", 0.6, 1.0)]

    def diarize(self, pcm: Path, speech: Any, words: Any, speakers: Any) -> Any:
        self.calls["diarize"] += 1
        return self.result

    def channel_result(self, speech: Any, words: Any, channels: int) -> Any:
        self.calls["channel_result"] += 1
        self.channel_inputs = (speech, words)
        return self.result.model_copy(update={"audio_channels": channels})


@dataclass
class Sink:
    """The records a stage published, as (topic name, key, record)."""

    records: list[tuple[str, str, Any]] = field(default_factory=list)

    def topics(self) -> list[str]:
        return [topic for topic, _, _ in self.records]

    def of(self, topic: str) -> list[Any]:
        return [value for name, _, value in self.records if name == topic]


@dataclass
class Harness:
    ports: Ports
    objects: FileStore
    transcripts: MemoryTranscripts
    flags: MemoryFlags
    models: FakeModels
    sink: Sink
    fetched: list[str]

    @classmethod
    def for_node(cls, name: str, root: Path) -> "Harness":
        """Ports as the worker binds them for graph node ``name``: its publish refuses
        what the node does not declare."""
        item: Node = node(name)
        objects, transcripts, flags = FileStore(root), MemoryTranscripts(), MemoryFlags()
        models, sink, fetched = FakeModels(), Sink(), []

        async def publish(spec: TopicSpec[Any], key: str, value: Any) -> None:
            item.check_write(spec)
            sink.records.append((spec.name, key, spec.decode(spec.encode(value))))

        async def fetch(url: str, fh: IO[bytes]) -> None:
            fetched.append(url)
            fh.write(b"\x00\x01" * 100)

        ports = Ports(objects=objects, transcripts=transcripts, publish=publish, flags=flags,
                      models=models, settings=Settings(data_dir=root / "data"), fetch=fetch)
        return cls(ports, objects, transcripts, flags, models, sink, fetched)

    async def job(self, tid: str = "tr_1", *, status: str = "processing",
                  file_id: str | None = None, webhook_url: str | None = None,
                  speakers: int | None = None, **spec_fields: Any) -> TranscriptRow:
        """A transcript row and its spec, as the gateway records them."""
        spec = JobSpec(transcript_id=tid, account_id="acct", key_id="key", created_at=T0,
                       audio_url=None if file_id else "https://audio.example/a.wav",
                       file_id=file_id, webhook_url=webhook_url, speakers_expected=speakers,
                       **spec_fields)
        await self.objects.put_bytes(JobFiles(tid).spec, spec.model_dump_json().encode())
        row = TranscriptRow(id=tid, account_id="acct", key_id="key", created_at=T0,
                            status=status, file_id=file_id, webhook_url=webhook_url,
                            audio_url=spec.audio_url)
        self.transcripts.rows[tid] = row
        return row

    async def keys(self, tid: str = "tr_1") -> list[str]:
        return sorted(i.key for i in await self.objects.list(JobFiles(tid).prefix))
