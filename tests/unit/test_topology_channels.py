"""Every channel of the dataflow is declared in ``topologies`` and used through it:
Faust tables, object keys, shared Redis keys; ``a5s topology`` prints them all."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from pydantic import BaseModel

from ops.cli import main
from schemas.settings import Settings
from topologies import GRAPH, OBJECT_KEYS, REDIS_KEYS, TABLES, TOPICS, JobFiles, describe
from topologies.objects import transcript_id_of, upload_key
from topologies.redis_keys import CANCELED, IDEMPOTENCY

ROOT = Path(__file__).resolve().parents[2]


def test_job_files_are_the_layout() -> None:
    files = JobFiles("tr_1")
    assert files.prefix == "jobs/tr_1/"
    assert [files.spec, files.audio, files.duration, files.speech, files.chunks, files.words,
            files.result] == [f"jobs/tr_1/{n}" for n in (
                "spec.json", "audio.pcm", "duration.json", "speech.json", "chunks.json",
                "words.json", "result.json")]
    assert upload_key("file_9") == "uploads/file_9"
    assert transcript_id_of(files.words) == "tr_1"
    assert transcript_id_of("uploads/file_9") is None and transcript_id_of("jobs/x") is None


def test_redis_keys_take_exactly_their_parts() -> None:
    assert CANCELED.key("tr_1") == ("canceled", "tr_1")
    assert IDEMPOTENCY.key("acct", "h") == ("idem", "acct", "h")
    with pytest.raises(ValueError):
        CANCELED.key("acct", "tr_1")


def test_every_table_names_a_model_and_has_one_owner() -> None:
    for table in TABLES:
        module, _, name = table.value.partition(":")
        model = getattr(importlib.import_module(module), name)
        assert issubclass(model, BaseModel), table.name
        assert len([n for n in GRAPH if table in n.tables]) == 1, table.name


def test_every_job_file_has_a_writer_and_a_reader() -> None:
    for key in OBJECT_KEYS:
        assert any(key in n.objects_written for n in GRAPH), key.pattern
        assert any(key in n.objects_read for n in GRAPH), key.pattern


def test_the_edges_no_topic_shows_are_declared() -> None:
    by_name = {n.name: n for n in GRAPH}
    speech = next(k for k in OBJECT_KEYS if k.pattern.endswith("speech.json"))
    assert speech in by_name["chunk"].objects_written and speech in by_name["diarize"].objects_read
    assert CANCELED in by_name["gateway"].redis_written
    assert all(CANCELED in by_name[s].redis_read for s in ("decode", "chunk", "transcribe",
                                                         "diarize", "reconcile"))


def test_topology_prints_every_channel_and_who_uses_it() -> None:
    out = CliRunner().invoke(main, ["topology"]).output
    assert out.strip() == describe(Settings().topic_prefix).strip()
    for topic in TOPICS:
        assert topic.name in out
    for table in TABLES:
        assert table.name in out and table.value in out
    for key in OBJECT_KEYS:
        assert key.pattern in out
    for rkey in REDIS_KEYS:
        assert rkey.pattern in out
    assert "owner: accounts; also read by: reconcile" in out
    assert re.search(r"jobs/<id>/speech\.json.*\n.*writers: chunk; readers: diarize", out)


def test_the_architecture_document_shows_the_graph_as_it_is() -> None:
    """docs/architecture.md draws the dataflow from ``a5s topology``: a node, channel, reader
    or writer changed in ``topologies`` without the document is caught here."""
    doc = (ROOT / "docs" / "architecture.md").read_text()
    shown = [block for block in re.findall(r"```\n(.*?)```", doc, re.S)
             if block.startswith("NODES")]
    assert len(shown) == 1, "docs/architecture.md shows `a5s topology`'s output once"
    default_prefix = Settings.model_fields["topic_prefix"].default
    assert shown[0].strip() == describe(default_prefix).strip(), (
        "docs/architecture.md is behind topologies: paste `a5s topology`'s output into it")


LITERAL_KEYS = re.compile(
    r"""f?["'](jobs/|uploads/)|"""
    r"""redis\.\w+\(\s*(True,\s*)?["'](canceled|webhook-auth|ledger|upload|upload-claim|idem|"""
    r"""account|key|retention-sweep)["']""")


def test_no_component_builds_a_key_from_a_string() -> None:
    """Object keys and Redis keys come from ``topologies`` only (docstrings aside)."""
    offenders = []
    for package in ("gateway", "pipeline", "stores"):
        for path in (ROOT / package).rglob("*.py"):
            for lineno, line in enumerate(path.read_text().splitlines(), 1):
                code = line.split("#")[0]
                if LITERAL_KEYS.search(code) and "``" not in code and '"""' not in code:
                    offenders.append(f"{path.relative_to(ROOT)}:{lineno}: {line.strip()}")
    assert offenders == []
