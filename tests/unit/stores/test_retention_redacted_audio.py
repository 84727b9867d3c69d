"""The sweep keeps a completed transcript's redacted audio as long as the transcript, and
removes it with every other processing copy of a failed or deleted one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from schemas.rows import TranscriptRow
from stores.objects import ObjectInfo
from stores.retention import _unneeded
from topologies.objects import JobFiles

NOW = datetime(2026, 3, 1, tzinfo=UTC)
FILES = JobFiles("tr_1")


def _row(status: str, deleted: int = 0) -> TranscriptRow:
    return TranscriptRow(id="tr_1", account_id="acct", key_id="k", status=status,
                         created_at=NOW - timedelta(days=2), completed_at=NOW - timedelta(days=1),
                         deleted=deleted)


def test_only_a_completed_transcripts_redacted_audio_stays() -> None:
    old = (NOW - timedelta(days=1)).timestamp()
    items = [ObjectInfo(FILES.audio, 10, old), ObjectInfo(FILES.redacted_audio, 10, old)]
    week = timedelta(days=7)
    assert [i.key for i in _unneeded(_row("completed"), items, NOW, week)] == [FILES.audio]
    assert len(_unneeded(_row("error"), items, NOW, week)) == 2
    assert len(_unneeded(_row("completed", deleted=1), items, NOW, week)) == 2
