"""``carry_page``: a kept list page brought up to date with the rows written since."""

from __future__ import annotations

from datetime import UTC, datetime

from schemas.rows import TranscriptRow, version_for
from stores.transcripts import carry_page

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def row(tid: str, status: str = "queued", deleted: int = 0) -> TranscriptRow:
    return TranscriptRow(id=tid, account_id="acct", key_id="k", created_at=NOW, status=status,
                         deleted=deleted, version=version_for(status, NOW))


def ids(rows: list[TranscriptRow] | None) -> list[tuple[str, str]] | None:
    return None if rows is None else [(r.id, r.status) for r in rows]


def test_a_newer_version_replaces_its_row_and_an_older_one_is_ignored() -> None:
    kept = [row("t3"), row("t2", "completed"), row("t1")]
    written = [row("t1", "completed"), row("t2")]  # t2: a replay of an older state
    assert ids(carry_page(kept, written, 10, None, None)) == \
        [("t3", "queued"), ("t2", "completed"), ("t1", "completed")]


def test_new_rows_join_in_id_order_within_the_cursor_and_the_limit() -> None:
    kept = [row("t5"), row("t3")]
    assert ids(carry_page(kept, [row("t4"), row("t9")], 10, None, None)) == \
        [("t9", "queued"), ("t5", "queued"), ("t4", "queued"), ("t3", "queued")]
    assert ids(carry_page(kept, [row("t4"), row("t9")], 10, None, "t6")) == \
        [("t5", "queued"), ("t4", "queued"), ("t3", "queued")], "t9 is above the cursor"
    # A full page knows nothing below its last row: a row there stays out, one above it
    # pushes the last row off.
    assert ids(carry_page(kept, [row("t1")], 2, None, None)) == [("t5", "queued"),
                                                                  ("t3", "queued")]
    assert ids(carry_page(kept, [row("t4")], 2, None, None)) == [("t5", "queued"),
                                                                  ("t4", "queued")]


def test_a_row_that_no_longer_belongs_leaves_or_the_page_is_read_again() -> None:
    kept = [row("t3"), row("t2"), row("t1")]
    assert ids(carry_page(kept, [row("t2", "deleted", 1)], 10, None, None)) == \
        [("t3", "queued"), ("t1", "queued")]
    assert carry_page(kept, [row("t2", "deleted", 1)], 3, None, None) is None, \
        "a full page's next row is not known"
    assert ids(carry_page(kept, [row("t2", "completed")], 10, "queued", None)) == \
        [("t3", "queued"), ("t1", "queued")]
    assert ids(carry_page(kept, [row("t2", "completed")], 10, ("queued", "processing"),
                          None)) == [("t3", "queued"), ("t1", "queued")]
    # A filtered page: a row that comes to match joins it, one that never did stays out.
    done = [row("t2", "completed")]
    assert ids(carry_page(done, [row("t3", "completed"), row("t4")], 10, "completed",
                          None)) == [("t3", "completed"), ("t2", "completed")]
