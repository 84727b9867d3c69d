"""decode on in-memory ports: upload or URL to PCM, duration reported once, replays reuse it."""

from __future__ import annotations

from pathlib import Path

import pytest

from memory_ports import T0, Harness
from pipeline.stages import decode
from schemas.errors import JobErrorCode, JobFailed
from schemas.records import Dispatch, DurationKnown, JobSpec
from topologies.objects import JobFiles, upload_key

RECORD = Dispatch(account_id="acct", transcript_id="tr_1", started_at=T0)
SPEC = JobSpec(transcript_id="tr_1", account_id="acct", key_id="k", created_at=T0,
               file_id="file_1")


def test_plan() -> None:
    assert decode.plan_decode(True, SPEC, None).action == "drop"
    assert decode.plan_decode(False, None, None).action == "drop"
    assert decode.plan_decode(False, SPEC, b"12.5") == decode.DecodePlan("reuse", 12.5)
    assert decode.plan_decode(False, SPEC, None).action == "decode"


async def test_an_upload_is_decoded_and_its_duration_reported(tmp_path: Path) -> None:
    h = Harness.for_node("decode", tmp_path)
    await h.job(file_id="file_1")
    await h.objects.put_bytes(upload_key("file_1"), b"RIFF....")
    await decode.run(h.ports, RECORD)
    files = JobFiles("tr_1")
    assert await h.objects.get_bytes(files.audio) == b"RIFF...."
    assert float(await h.objects.get_bytes(files.duration)) == 2.5
    [event] = h.sink.of("account-events")
    assert isinstance(event, DurationKnown) and event.duration == 2.5
    assert h.fetched == []


async def test_a_replay_reports_the_stored_duration_without_decoding_again(
        tmp_path: Path) -> None:
    h = Harness.for_node("decode", tmp_path)
    await h.job(file_id="file_1")
    await h.objects.put_bytes(upload_key("file_1"), b"RIFF....")
    await decode.run(h.ports, RECORD)
    await h.objects.delete(upload_key("file_1"))  # gone: a second decode would fail
    h.models.duration = 99.0
    await decode.run(h.ports, RECORD)
    assert h.models.calls["decode"] == 1
    assert [e.duration for e in h.sink.of("account-events")] == [2.5, 2.5]


async def test_an_audio_url_is_fetched(tmp_path: Path) -> None:
    h = Harness.for_node("decode", tmp_path)
    await h.job()
    await decode.run(h.ports, RECORD)
    assert h.fetched == ["https://audio.example/a.wav"]
    assert len(h.sink.of("account-events")) == 1


async def test_a_canceled_or_deleted_job_is_dropped(tmp_path: Path) -> None:
    h = Harness.for_node("decode", tmp_path)
    await h.job(file_id="file_1")
    await h.objects.put_bytes(upload_key("file_1"), b"x")
    h.flags.canceled.add("tr_1")
    await decode.run(h.ports, RECORD)
    await decode.run(h.ports, RECORD.model_copy(update={"transcript_id": "tr_gone"}))
    assert h.sink.records == [] and h.models.calls["decode"] == 0
    assert await h.keys() == [JobFiles("tr_1").spec]


async def test_a_missing_upload_ends_the_job_with_file_not_found(tmp_path: Path) -> None:
    h = Harness.for_node("decode", tmp_path)
    await h.job(file_id="file_1")
    with pytest.raises(JobFailed) as err:
        await decode.run(h.ports, RECORD)
    assert err.value.code == JobErrorCode.file_not_found
    assert h.sink.records == []
