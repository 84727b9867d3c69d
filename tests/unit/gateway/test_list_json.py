"""The list body built from kept row summaries is the schema's own JSON, byte for byte,
and a row's next version is serialised afresh."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from gateway.transcripts import ListJson
from schemas.api import TranscriptList, rfc3339
from schemas.rows import TranscriptRow, version_for


def _row(n: int, status: str = "queued", **extra: object) -> TranscriptRow:
    created = datetime(2026, 11, 26, 23, 0, n, 123456, tzinfo=UTC)
    fields: dict[str, object] = dict(
        id=f"tr_{n:026d}", account_id="acc_1", key_id="key_1", created_at=created,
        status=status, version=version_for(status, created),
        metadata='{"order": "n\\u00e9", "n": %d}' % n)
    fields.update(extra)
    return TranscriptRow(**fields)  # type: ignore[arg-type]


def _schema(rows: list[TranscriptRow], has_more: bool, next_before: str | None) -> bytes:
    return TranscriptList(data=[r.summary() for r in rows], has_more=has_more,
                          next_before=next_before).model_dump_json(by_alias=True).encode()


def test_page_is_the_schemas_json() -> None:
    done = datetime(2026, 11, 26, 23, 1, 0, tzinfo=UTC)
    rows = [_row(1), _row(2, "processing", started_at=done),
            _row(3, "completed", started_at=done, completed_at=done, audio_duration=2.5,
                 webhook_url="https://example.com/hook", webhook_status_code=200),
            _row(4, "error", error_code="audio_invalid", error_message="Not audio."),
            _row(5, "deleted", deleted=1)]
    lists = ListJson()
    for page, has_more, before in ((rows, True, rows[-1].id), (rows[:2], False, None),
                                   ([], False, None)):
        assert lists.page(page, has_more=has_more, next_before=before) == \
            _schema(page, has_more, before)
        # the second time from the kept summaries
        assert lists.page(page, has_more=has_more, next_before=before) == \
            _schema(page, has_more, before)


def test_a_rows_new_version_is_serialised_again() -> None:
    lists = ListJson()
    queued = _row(1)
    assert lists.page([queued], has_more=False, next_before=None) == \
        _schema([queued], False, None)
    done = queued.model_copy(update={"status": "completed",
                                     "version": version_for("completed"),
                                     "completed_at": datetime.now(UTC)})
    assert lists.page([done], has_more=False, next_before=None) == _schema([done], False, None)
    hooked = done.model_copy(update={"webhook_status_code": 500, "version": done.version + 1})
    assert b'"webhook_status_code":500' in lists.page([hooked], has_more=False,
                                                     next_before=None)


def test_kept_summaries_are_bounded() -> None:
    lists = ListJson(most=3)
    rows = [_row(n) for n in range(1, 6)]
    assert lists.page(rows, has_more=False, next_before=None) == _schema(rows, False, None)
    assert len(lists._rows) == 3


def test_rfc3339_is_utc_with_milliseconds() -> None:
    at = datetime(2026, 1, 2, 3, 4, 5, 678901)
    assert rfc3339(at) == "2026-01-02T03:04:05.678Z"
    assert rfc3339(at.replace(tzinfo=UTC)) == "2026-01-02T03:04:05.678Z"
    india = timezone(timedelta(hours=5, minutes=30))
    assert rfc3339(at.replace(tzinfo=india)) == "2026-01-01T21:34:05.678Z"
    assert rfc3339(datetime(2026, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)) == \
        "2026-12-31T23:59:59.999Z"
