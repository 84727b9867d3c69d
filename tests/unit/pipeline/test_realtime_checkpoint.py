"""Checkpoints of live sessions: a recognizer rebuilt from a resume point goes on exactly as
the one it replaces, and the bookkeeping that finds the audio a takeover needs.

The recognizer runs on real speech with tiny.en (inline, not at real-time pace);
``tests/integration/test_realtime_takeover.py`` kills a worker and checks a session goes on
from its checkpoint through the service.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pipeline.realtime import SessionRecognizer, StreamingModels
from pipeline.realtime.checkpoint import FedAudio, checkpoint_for, resume_audio
from pipeline.realtime.recognizer import pcm_to_float
from schemas.records import OpenSegment, RealtimeAudio, RealtimeCheckpoint, ResumePoint

from asr_support import JFK
from test_realtime_recognizer import frames, pcm_of


@pytest.fixture(scope="module")
def models(model_cache: Path) -> StreamingModels:
    return StreamingModels.from_specs(model_cache, "tiny.en")


def test_a_session_rebuilt_from_a_resume_point_ends_with_the_same_text(
        models: StreamingModels) -> None:
    pcm = pcm_of(JFK)
    whole = SessionRecognizer(models)
    between: list[ResumePoint] = []             # after a final, no segment open
    inside: list[ResumePoint] = []              # inside a segment, earlier ones settled
    for frame in frames(pcm):
        updates = whole.accept(frame)
        point = whole.resume_point()
        if point is None:
            continue
        if point.open is None and any(u.is_final for u in updates):
            between.append(point)
        elif point.open is not None and point.settled and point.judged - point.open.start > 8000:
            inside.append(point)
    last = whole.finish()[-1]
    assert len(between) >= 3 and inside, "jfk.flac gave no resume point"
    for point in [between[0], inside[len(inside) // 2], between[-1]]:
        point = ResumePoint.model_validate_json(point.model_dump_json())   # as the log has it
        rebuilt = SessionRecognizer(models)
        rebuilt.restore(point, pcm_to_float(pcm[point.start * 2:point.judged * 2]))
        shown = []
        for frame in frames(pcm[point.judged * 2:]):
            shown += rebuilt.accept(frame)
        shown += rebuilt.finish()
        settled = " ".join(point.settled)
        assert all(u.text.lower().startswith(settled.lower()[:20]) for u in shown), shown[:2]
        assert shown[-1].text == last.text
        assert shown[-1].end == pytest.approx(last.end)  # the stream's clock goes on


def test_no_resume_point_while_a_closed_segment_waits_for_its_final(
        models: StreamingModels) -> None:
    pcm = pcm_of(JFK)
    rec = SessionRecognizer(models)
    waiting = first_open = False
    for frame in frames(pcm):
        rec.advance(*rec.detect(frame))         # endpointing only: no final is decoded
        point = rec.resume_point()
        if rec.finals_outstanding:
            waiting = True
            assert point is None
        elif not waiting and point is not None and point.open is not None:
            first_open = True                   # the first segment, nothing closed yet
    assert waiting and first_open
    with pytest.raises(RuntimeError):
        rec.restore(point_at(0, 512), np.zeros(512, dtype=np.float32))


def point_at(start: int, judged: int, settled: tuple[str, ...] = ()) -> ResumePoint:
    return ResumePoint(start=start, judged=judged, settle=3, last_end=start, settled=list(settled),
                       vad=bytes(320 * 4), open=OpenSegment(index=3, start=start, opened_at=judged,
                                                            speech=512, temp_end=0, probs=[]))


def test_a_checkpoint_names_the_record_holding_its_first_sample() -> None:
    fed = FedAudio(first=1000)
    for seq, offset in ((5, 50), (6, 53), (7, 54)):
        fed.add(seq, offset, 960)
    point = point_at(2000, 2512, ("Hi.",))
    seq, offset, checkpoint = checkpoint_for(point, fed, [("a5s", 4)])  # type: ignore[misc]
    assert (seq, offset, checkpoint.skip) == (6, 53, 2000 - 1960)
    assert checkpoint.point == point and checkpoint.vocabulary == [("a5s", 4)]
    assert checkpoint_for(point_at(900, 1412), fed, None) is None        # forgotten
    fed.add(9, 57, 960)                         # record 8 lost: counted as long as record 7
    assert fed.holding(1000 + 4 * 960) == (9, 57, 0)
    again = RealtimeCheckpoint.model_validate_json(checkpoint.model_dump_json())
    assert again == checkpoint


def _records(first_seq: int, sizes: list[int]) -> list[RealtimeAudio]:
    out, value = [], 0
    for i, n in enumerate(sizes):
        pcm = np.arange(value, value + n, dtype="<i2").tobytes()
        value += n
        out.append(RealtimeAudio(session_id="s", seq=first_seq + i, gateway_id="g", pcm=pcm))
    return out


def test_resume_audio_cuts_the_primer_and_the_rest() -> None:
    checkpoint = RealtimeCheckpoint(skip=100, point=point_at(1100, 1612))
    primer, rest = resume_audio(checkpoint, 4, _records(4, [300, 300, 300]))
    samples = np.frombuffer(primer + rest, dtype="<i2")
    assert len(primer) == 512 * 2 and samples[0] == 100 and samples[-1] == 899
    with pytest.raises(ValueError, match="no longer holds"):
        resume_audio(checkpoint, 3, _records(4, [300, 300, 300]))
    gap = [*_records(4, [300]), *_records(6, [300, 300])]   # record 5 lost: as silence
    primer, rest = resume_audio(checkpoint, 4, gap)
    samples = np.frombuffer(primer + rest, dtype="<i2")
    assert len(samples) == 1100 and not samples[200:500].any() and samples[500] == 0
    assert samples[501] == 1 and samples[0] == 100
    with pytest.raises(ValueError, match="ends before"):
        resume_audio(checkpoint, 4, _records(4, [300, 300]))
