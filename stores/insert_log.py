"""Rows taken for the embedded ClickHouse and not yet inserted, kept in a file until they are.

On the embedded engine every insert writes a part (and the merges after it rewrite it), so
one insert of many rows costs little more than one of a row. The job path writes a few
rows per job into three tables; gathering them for a second and inserting each table's
rows once saves most of that work. The rows must not be lost meanwhile, so each is first
appended to a segment file of this log (a ``write`` of one line, in the operating system's
cache when it returns: a process that dies keeps it, as chdb's own parts are kept, neither
being synced to disk). The owner inserts a segment's rows, then deletes the segment; a
process that restarts inserts the segments it finds before anything reads. A segment
inserted twice (a crash between the insert and the delete) does no harm: the tables are
versioned ``ReplacingMergeTree`` tables read with ``FINAL``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["InsertLog", "Batch"]

log = logging.getLogger(__name__)
_SEGMENT = "segment-{:08d}.jsonl"
_REJECTED = "rejected.jsonl"


@dataclass
class Batch:
    """Rows taken from the log, by (table, column names), and the segments that hold them;
    each row is a JSON array of its values, as ClickHouse's ``JSONCompactEachRow`` reads it."""

    rows: dict[tuple[str, tuple[str, ...]], list[str]]
    segments: list[Path]

    def __len__(self) -> int:
        return sum(len(r) for r in self.rows.values())


def _segment_number(segment: Path) -> int:
    return int(segment.stem.split("-")[1])


class InsertLog:
    """Append-only segments under ``directory``; thread-safe.

    Args:
        directory: where the segments live (created); beside the engine's data, so a
            backup of one is a backup of both.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._rows: dict[tuple[str, tuple[str, ...]], list[str]] = {}
        self._count = 0
        self._taken: list[Path] = []
        """Segments taken by a batch that failed: deleted with the next batch that succeeds."""
        found = sorted(directory.glob("segment-*.jsonl"), key=_segment_number)
        self._number = _segment_number(found[-1]) + 1 if found else 0
        self._sealed = found
        """Segments whose rows are pending (an earlier process's, one a write failed in):
        deleted with the next batch."""
        for path in found:
            self._read(path)
        if self._count:
            log.info("insert log: %d rows left by an earlier process, to insert", self._count)
        else:
            self.done(Batch({}, found))
            self._sealed = []
        self._fd = self._open()

    @property
    def pending(self) -> int:
        """Rows appended and not yet taken (or taken by a batch that failed)."""
        return self._count

    def _open(self) -> int:
        path = self.directory / _SEGMENT.format(self._number)
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def _read(self, path: Path) -> None:
        """An earlier process's segment into the pending rows; a torn last line (the process
        died inside the write, so its caller never heard back) is left out."""
        with path.open("rb") as f:
            for line in f:
                try:
                    table, names, rows = json.loads(line)
                except ValueError:
                    log.warning("insert log: a torn line in %s left out", path.name)
                    continue
                self._add(table, tuple(names),
                          [json.dumps(row, ensure_ascii=False) for row in rows])

    def _add(self, table: str, names: tuple[str, ...], rows: list[str]) -> None:
        self._rows.setdefault((table, names), []).extend(rows)
        self._count += len(rows)

    def append(self, table: str, names: Sequence[str], rows: list[str]) -> None:
        """Keep ``rows`` (each a JSON array), as one line: ``[table, names, rows]``.

        A write that fails (a full disk) raises to the caller, whose rows are not kept,
        and later rows go to a new segment, away from the bytes it may have left.
        """
        line = (f"[{json.dumps(table)},{json.dumps(list(names))},[{','.join(rows)}]]\n"
                ).encode()
        with self._lock:
            try:
                view = memoryview(line)
                while view:
                    view = view[os.write(self._fd, view):]
            except OSError:
                os.close(self._fd)
                self._sealed.append(self.directory / _SEGMENT.format(self._number))
                self._number += 1
                self._fd = self._open()
                raise
            self._add(table, tuple(names), rows)

    def take(self) -> Batch | None:
        """The pending rows, and a new segment for the rows that come after them."""
        with self._lock:
            if not self._count:
                return None
            rows, self._rows, self._count = self._rows, {}, 0
            os.close(self._fd)
            segments = [*self._taken, *self._sealed,
                        self.directory / _SEGMENT.format(self._number)]
            self._taken, self._sealed = [], []
            self._number += 1
            self._fd = self._open()
        return Batch(rows, segments)

    def done(self, batch: Batch) -> None:
        """The batch is in ClickHouse: its segments go."""
        for path in batch.segments:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def give_back(self, batch: Batch) -> None:
        """The batch's insert failed: its rows go with the next batch, before newer ones."""
        with self._lock:
            newer, self._rows = self._rows, {}
            for (table, names), rows in [*batch.rows.items(), *newer.items()]:
                self._rows.setdefault((table, names), []).extend(rows)
            self._count += len(batch)
            self._taken = [*batch.segments, *self._taken]

    def reject(self, table: str, names: Sequence[str], row: str, error: str) -> None:
        """A row the engine refuses on its own: kept aside in ``rejected.jsonl`` for its
        operator, and logged, so that it does not hold back the rows after it."""
        log.error("insert log: a %s row refused by ClickHouse, kept in %s: %s",
                  table, self.directory / _REJECTED, error)
        with (self.directory / _REJECTED).open("a") as f:
            f.write(f"[{json.dumps(table)},{json.dumps(list(names))},[{row}],"
                    f"{json.dumps(error)}]\n")

    def close(self) -> None:
        with self._lock:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = -1
