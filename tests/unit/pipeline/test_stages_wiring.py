"""The worker's wiring: agents come from ``topologies.GRAPH`` alone, a record put into an
agent (Faust's ``test_context``, no broker) reaches its stage, and what the stage
publishes goes to its node's declared topics; anything else is refused.

The context is in-memory (objects in a temporary directory, transcripts and flags in
memory, stand-in models: see ``memory_ports``); Faust itself is real.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from memory_ports import T0, FakeModels, MemoryFlags, MemoryTranscripts
from pipeline.app import Pipeline, create_app, resolve
from schemas.records import (Dispatch, DurationKnown, Finished, JobOutcome, JobSpec,
                             TranscriptResult, WebhookDue)
from schemas.rows import TranscriptRow
from schemas.settings import Settings
from stores.metrics import Metrics
from stores.objects import FileStore
from topologies import GRAPH, UndeclaredWrite, node, worker_nodes
from topologies.objects import JobFiles, upload_key
from topologies.topics import ACCOUNT_EVENTS, COMPLETED, OUTCOMES, WEBHOOKS


class Wired:
    def __init__(self, root: Path) -> None:
        self.settings = Settings(data_dir=root / "data", topic_prefix="t.")
        self.objects = FileStore(root / "objects")
        self.transcripts = MemoryTranscripts()
        ctx = SimpleNamespace(settings=self.settings, objects=self.objects, redis=MemoryFlags(),
                              metrics=Metrics(), ch=None, producer=None)
        self.app = create_app(self.settings)
        self.pipeline = Pipeline(self.app, ctx, FakeModels(),  # type: ignore[arg-type]
                                 transcripts=self.transcripts)
        self.sent: list[tuple[str, bytes, bytes]] = []

        async def send(topic: str, key: bytes, value: bytes) -> None:
            self.sent.append((topic, key, value))

        self.pipeline.send = send  # type: ignore[method-assign]

    def published(self) -> list[tuple[str, Any]]:
        out = []
        for topic, _, value in self.sent:
            spec = next(t for t in (ACCOUNT_EVENTS, OUTCOMES, COMPLETED, WEBHOOKS)
                        if "t." + t.name == topic)
            out.append((spec.name, spec.decode(value)))
        return out

    async def job(self, tid: str, file_id: str | None = None) -> None:
        spec = JobSpec(transcript_id=tid, account_id="acct", key_id="k", created_at=T0,
                       file_id=file_id, audio_url=None if file_id else "https://a.example/x")
        await self.objects.put_bytes(JobFiles(tid).spec, spec.model_dump_json().encode())
        self.transcripts.rows[tid] = TranscriptRow(id=tid, account_id="acct", key_id="k",
                                                   created_at=T0, status="processing",
                                                   file_id=file_id)


def test_every_worker_node_is_installed_from_the_graph(tmp_path: Path) -> None:
    wired = Wired(tmp_path)
    installed = wired.pipeline.register()
    assert installed == [n.name for n in GRAPH if n.handler is not None]
    agents = set(wired.app.agents)
    for item in worker_nodes():
        if item.kind == "stage" or item.name in ("accounts", "webhooks"):
            assert f"a5s.{item.name}" in agents, item.name
    assert "gateway" not in installed


def test_every_handler_resolves_and_stages_that_end_jobs_declare_outcomes() -> None:
    for item in worker_nodes():
        assert callable(resolve(item.handler or "")), item.name
        if item.kind == "stage":
            assert len(item.reads) == 1
            if not item.retry_forever:  # it may end a job: an error outcome for finalize
                assert OUTCOMES in item.writes, item.name


async def test_a_publish_to_an_undeclared_topic_is_refused(tmp_path: Path) -> None:
    wired = Wired(tmp_path)
    decode = wired.pipeline.publisher(node("decode"))
    with pytest.raises(UndeclaredWrite, match="decode.*transcripts.completed"):
        await decode(COMPLETED, "tr_1", object())
    reconcile = wired.pipeline.publisher(node("reconcile"))
    with pytest.raises(UndeclaredWrite):
        await reconcile(WEBHOOKS, "tr_1", WebhookDue(transcript_id="tr_1", account_id="a",
                                                      webhook_id="m"))
    assert wired.sent == []
    await decode(ACCOUNT_EVENTS, "acct", DurationKnown(account_id="acct", transcript_id="tr_1",
                                                       duration=1.0))
    assert [topic for topic, _, _ in wired.sent] == ["t.account-events"]


async def test_a_record_reaches_its_stage_and_publishes_to_the_declared_topic(
        tmp_path: Path) -> None:
    wired = Wired(tmp_path)
    wired.pipeline.register({"decode", "finalize"})
    await wired.job("tr_1", file_id="file_1")
    await wired.objects.put_bytes(upload_key("file_1"), b"audio")
    dispatch = Dispatch(account_id="acct", transcript_id="tr_1", started_at=T0)
    async with wired.app.agents["a5s.decode"].test_context() as agent:
        await agent.put(dispatch.model_dump_json().encode())
    [(topic, event)] = wired.published()
    assert topic == "account-events" and isinstance(event, DurationKnown)
    assert event.duration == 2.5 and wired.sent[0][1] == b"acct"

    wired.sent.clear()
    await wired.objects.put_bytes(JobFiles("tr_1").result,
                                  TranscriptResult(text="hi").model_dump_json().encode())
    outcome = JobOutcome(account_id="acct", transcript_id="tr_1", status="completed",
                         duration=2.5, result_key=JobFiles("tr_1").result)
    async with wired.app.agents["a5s.finalize"].test_context() as agent:
        await agent.put(outcome.model_dump_json().encode())
    [(topic, event)] = wired.published()
    assert topic == "account-events" and isinstance(event, Finished)
    assert event.status == "completed"


async def test_a_job_error_in_a_stage_becomes_an_error_outcome(tmp_path: Path) -> None:
    wired = Wired(tmp_path)
    wired.pipeline.register({"decode"})
    await wired.job("tr_2", file_id="file_missing")
    dispatch = Dispatch(account_id="acct", transcript_id="tr_2", started_at=T0)
    async with wired.app.agents["a5s.decode"].test_context() as agent:
        await agent.put(dispatch.model_dump_json().encode())
    [(topic, outcome)] = wired.published()
    assert topic == "outcomes" and outcome.status == "error"
    assert outcome.error_code == "file_not_found"


async def test_a_jobs_records_run_through_a_node_one_after_another() -> None:
    """Two records of one job (a re-dispatch beside the first) never run side by side in a
    node with several actors; other jobs' records do."""
    import asyncio

    from pipeline.app import OneAtATime

    jobs = OneAtATime()
    running: dict[str, int] = {}
    most: dict[str, int] = {}

    async def record(tid: str) -> None:
        async with jobs.hold(tid):
            running[tid] = running.get(tid, 0) + 1
            most[tid] = max(most.get(tid, 0), running[tid])
            most["all"] = max(most.get("all", 0), sum(running.values()))
            await asyncio.sleep(0.01)
            running[tid] -= 1

    await asyncio.gather(record("tr_a"), record("tr_a"), record("tr_b"), record("tr_a"))
    assert most["tr_a"] == 1 and most["tr_b"] == 1 and most["all"] == 2
    assert len(jobs) == 0  # nothing kept once a job's records are done


def test_model_stages_take_a_record_per_thread_of_the_models_pool(tmp_path: Path) -> None:
    wired = Wired(tmp_path)
    wired.pipeline.register()
    actors = {name.removeprefix("a5s."): agent.concurrency
              for name, agent in wired.app.agents.items()}
    assert {name: actors[name] for name in ("decode", "chunk", "diarize", "finalize")} == {
        "decode": 2, "chunk": 2, "diarize": 2, "finalize": 1}
    assert actors["transcribe"] == wired.settings.models.transcribe_concurrency
