"""Checkpoints of live sessions: where a session taken over is rebuilt from.

A worker that takes a live session over rebuilds its recognizer by replaying the session's
audio from the log. From its start, the whole session's audio had to stay in the log as
long as the session lived, and the embedded broker's CPU grows with what its log holds
(docs/realtime.md, "The broker's CPU"). So after a final the worker holding a session
writes a :class:`~schemas.records.RealtimeCheckpoint` into the session's own audio log: the
recognizer's state (:class:`~schemas.records.ResumePoint`: the settled text, the open
segment's endpointing, the VAD's state) and the audio record from which a rebuilt
recognizer needs the audio. From then on only that record and what follows are kept for
the session, and a takeover replays from there.

Pure bookkeeping: :class:`FedAudio` maps samples to the records that carried them,
:func:`checkpoint_for` builds a checkpoint, :func:`resume_audio` cuts the replayed
records into the primer and the rest.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from schemas.records import RealtimeAudio, RealtimeCheckpoint, ResumePoint

__all__ = ["FedAudio", "CHECKPOINT_INTERVAL_S", "checkpoint_for", "resume_audio"]

CHECKPOINT_INTERVAL_S = 5.0
"""Least time between two checkpoints of a session (each carries its whole settled text)."""


@dataclass(frozen=True, slots=True)
class _Fed:
    seq: int
    offset: int
    first: int
    """Absolute index of the record's first sample."""


class FedAudio:
    """The audio records a session's recognizer took in lately, by the samples they held.

    Args:
        first: absolute index of the next record's first sample.
        keep: records remembered (at 60 ms a record, 400 cover 24 s: far more than the
            preroll a resume point reaches back).
    """

    def __init__(self, first: int = 0, keep: int = 400) -> None:
        self._items: deque[_Fed] = deque(maxlen=keep)
        self.samples = first

    def add(self, seq: int, offset: int, samples: int) -> None:
        """A record taken in; records missing before it count as long as the last one
        (as :func:`resume_audio` hears them)."""
        if self._items and seq > (last := self._items[-1]).seq + 1:
            self.samples += (seq - last.seq - 1) * (self.samples - last.first)
        self._items.append(_Fed(seq, offset, self.samples))
        self.samples += samples

    def holding(self, sample: int) -> tuple[int, int, int] | None:
        """``(seq, offset, skip)`` of the record holding ``sample`` (``skip`` samples of it
        come before), or None when that record is no longer remembered."""
        for item in reversed(self._items):
            if item.first <= sample:
                return item.seq, item.offset, sample - item.first
        return None


def checkpoint_for(point: ResumePoint, fed: FedAudio,
                   vocabulary: list[tuple[str, int]] | None
                   ) -> tuple[int, int, RealtimeCheckpoint] | None:
    """The checkpoint of ``point``: ``(seq, offset, checkpoint)`` of the audio record to
    go on from, or None when that record is no longer known."""
    found = fed.holding(point.start)
    if found is None:
        return None
    seq, offset, skip = found
    return seq, offset, RealtimeCheckpoint(skip=skip, point=point, vocabulary=vocabulary)


def resume_audio(checkpoint: RealtimeCheckpoint, seq: int,
                 records: Sequence[RealtimeAudio]) -> tuple[bytes, bytes]:
    """The primer (the audio ``[start, judged)`` of the checkpoint's point) and the audio
    after it, from the session's records ``seq`` onwards, in order.

    A record missing after the first (the embedded broker can lose the last acknowledged
    records when it restarts) is heard as silence as long as the record before it, so the
    stream's clock stays right.

    Raises:
        ValueError: the records do not start at ``seq`` or end before ``judged`` (the log
            lost audio the checkpoint needs).
    """
    if not records or records[0].seq != seq:
        raise ValueError(f"the log no longer holds audio record {seq} of the checkpoint")
    parts = [records[0].pcm]
    for a, b in zip(records, records[1:]):
        parts += [bytes(len(a.pcm))] * (b.seq - a.seq - 1) + [b.pcm]
    pcm = b"".join(parts)[checkpoint.skip * 2:]
    cut = (checkpoint.point.judged - checkpoint.point.start) * 2
    if len(pcm) < cut:
        raise ValueError("the log ends before the checkpoint's judged audio")
    return pcm[:cut], pcm[cut:]
