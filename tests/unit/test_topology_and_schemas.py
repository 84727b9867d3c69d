"""The dataflow declarations and the request rules of the spec that need no server."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from schemas.api import CreateTranscript, Transcript, normalise_language
from schemas.errors import (HTTP_ERRORS, STREAM_CLOSE_CODES, InvalidRequest, StreamErrorCode,
                            UnsupportedLanguage, UnsupportedModel)
from schemas.ids import transcript_id
from schemas.settings import Settings
from topologies import GRAPH, TOPICS, describe


def test_every_topic_is_declared_once_and_used() -> None:
    names = [t.name for t in TOPICS]
    assert len(names) == len(set(names))
    touched = {t.name for n in GRAPH for t in (*n.reads, *n.writes)}
    assert touched == set(names), "every declared topic appears in the graph"
    readers = {t.name for n in GRAPH for t in n.reads}
    assert readers >= set(names) - {"transcripts.completed"}, "every internal topic has a reader"
    assert "transcripts.completed" in describe()


def test_realtime_topics_keep_minutes_only() -> None:
    by_name = {t.name: t for t in TOPICS}
    assert by_name["realtime-audio"].retention_ms <= 15 * 60 * 1000
    assert by_name["realtime-audio"].config()["retention.ms"] == str(10 * 60 * 1000)


def test_http_errors_match_section_7() -> None:
    table = {(e.http_status, e.type, e.code) for e in HTTP_ERRORS}
    assert (400, "invalid_request_error", "unsupported_language") in table
    assert (403, "permission_error", "model_access_denied") in table
    assert (429, "rate_limit_error", "queue_full") in table
    assert (502, "api_error", "upstream_unavailable") in table
    assert STREAM_CLOSE_CODES[StreamErrorCode.frame_too_large] == 4409
    assert STREAM_CLOSE_CODES[StreamErrorCode.internal_error] == 1011


@pytest.mark.parametrize("value", ["en", "EN-us", "en_GB", "en-za", "En-Nz"])
def test_english_variants(value: str) -> None:
    assert normalise_language(value) == "en"


@pytest.mark.parametrize("value", ["fr", "en-XX", "english", ""])
def test_other_languages(value: str) -> None:
    with pytest.raises(UnsupportedLanguage):
        normalise_language(value)


def test_create_rules() -> None:
    ok = CreateTranscript.model_validate({"audio_url": "https://a.example/x.wav",
                                          "language_code": "en_US"})
    assert ok.language_code == "en" and ok.model == "a5s-async-v1"
    with pytest.raises(UnsupportedModel):
        CreateTranscript.model_validate({"audio_url": "https://a/x", "model": "whisper-1"})
    with pytest.raises(InvalidRequest):
        CreateTranscript.model_validate({})
    with pytest.raises(InvalidRequest):
        CreateTranscript.model_validate({"audio_url": "https://a/x", "file_id": "file_1"})
    with pytest.raises(InvalidRequest):
        CreateTranscript.model_validate({"audio_url": "https://a/x",
                                         "webhook_auth_header_name": "X"})
    for bad in ("ftp://a/x", "https://user:pw@a/x", "not a url"):
        with pytest.raises(ValidationError):
            CreateTranscript.model_validate({"audio_url": bad})
    with pytest.raises(ValidationError):
        CreateTranscript.model_validate({"audio_url": "https://a/" + "x" * 8192})
    with pytest.raises(ValidationError):
        CreateTranscript.model_validate({"audio_url": "https://a/x",
                                         "metadata": {"k": "v" * 16500}})


def test_result_fields_only_when_completed() -> None:
    base = {"id": transcript_id(), "status": "processing", "created_at": "2026-01-01T00:00:00Z",
            "text": "hello", "words": []}
    assert "text" not in json.loads(Transcript.model_validate(base).model_dump_json())
    done = Transcript.model_validate(base | {"status": "completed"}).model_dump(mode="json")
    assert done["text"] == "hello" and done["created_at"] == "2026-01-01T00:00:00.000Z"


def test_ids_are_time_ordered() -> None:
    ids = [transcript_id() for _ in range(500)]
    assert ids == sorted(ids) and len(set(ids)) == 500
    assert all(len(i) == 29 for i in ids)


def test_settings_from_env_and_toml(tmp_path, monkeypatch) -> None:
    cfg = tmp_path / "a5s.toml"
    cfg.write_text('port = 9100\n[limits]\nusage_limit_seconds = 60\n')
    monkeypatch.setenv("A5S_CONFIG", str(cfg))
    monkeypatch.setenv("A5S_WEBHOOKS__RETRY_SCHEDULE_S", "[1, 2]")
    s = Settings()
    assert s.port == 9100 and s.limits.usage_limit_seconds == 60
    assert s.webhooks.retry_schedule_s == (1, 2)
    assert s.clickhouse_dsn.startswith("chdb://") and s.embedded_kafka
    monkeypatch.setenv("A5S_CLICKHOUSE_URL", "http://ch:8123")
    assert Settings().clickhouse_dsn == "http://ch:8123"
