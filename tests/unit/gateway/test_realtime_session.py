"""The streaming protocol's state machine, without a network (spec sections 3, 6, 7).

Every rule that needs no socket: the first message, language and provider, what may
follow ``start``, audio only once ready, frame sizes, real-time pacing with its burst, the
session limit, audio after finish, the start, idle and stall deadlines, and the usage
billed. Times are given explicitly, so the deadlines are exercised without waiting.
"""

from __future__ import annotations

import json

import pytest

from gateway.realtime_session import (BYTES_PER_MS, Reply, SessionState, StreamSession,
                                      language_tag)
from schemas.errors import StreamError, StreamErrorCode as Code
from schemas.records import RealtimeAudio
from schemas.settings import RealtimeSettings

OPTS = RealtimeSettings()
FRAME = bytes(640)          # 20 ms


def start(**fields) -> str:
    return json.dumps({"type": "start", **fields})


def ready_session(now: float = 0.0, limit_ms: int = 300_000) -> StreamSession:
    s = StreamSession(OPTS, now)
    assert s.text(start(), now) is Reply.start
    assert s.ready(limit_ms, now)
    return s


def send(s: StreamSession, now: float) -> None:
    s.sent(RealtimeAudio(session_id="s", seq=s.next_seq(), gateway_id="gw"), now)


def code_of(call) -> Code:
    with pytest.raises(StreamError) as err:
        call()
    return err.value.code


def test_the_states_of_a_session() -> None:
    s = StreamSession(OPTS, 0.0)
    assert s.state is SessionState.connected
    assert s.text(start(), 0.1) is Reply.start
    assert s.state is SessionState.starting
    assert s.ready(300_000, 0.2) and s.state is SessionState.ready and s.was_ready
    assert s.audio(FRAME, 0.3).pcm == FRAME
    assert s.text(json.dumps({"type": "finish"}), 0.4) is Reply.finish
    assert s.begin_finish() and s.state is SessionState.finishing
    assert not s.begin_finish()                      # served once
    assert s.close() and s.state is SessionState.closed
    assert not s.close()


@pytest.mark.parametrize("first", [
    json.dumps({"type": "ping"}), json.dumps({"type": "finish"}), "not json", "[[[[", "{}",
    start(unknown=1), start(encoding="opus"), start(sample_rate=8000), start(channels=2),
    start(custom_vocabulary=[{"text": "x" * 101}]),
    start(custom_vocabulary=[{"text": "x", "strength": 13}]),
    start(custom_vocabulary=[{"text": "x"}] * 65),
])
def test_the_first_message_must_be_a_valid_start(first: str) -> None:
    assert code_of(lambda: StreamSession(OPTS, 0).text(first, 0)) is Code.invalid_start


def test_language_and_provider() -> None:
    assert language_tag("en_gb") == "en-GB" and language_tag("EN") == "en"
    assert code_of(lambda: StreamSession(OPTS, 0).text(start(language="de-DE"), 0)) \
        is Code.unsupported_language
    assert code_of(lambda: StreamSession(OPTS, 0).text(start(providers=["other"]), 0)) \
        is Code.unknown_provider
    assert code_of(lambda: StreamSession(OPTS, 0).text(start(providers=[]), 0)) \
        is Code.unknown_provider
    s = StreamSession(OPTS, 0)
    s.text(start(language="en-us"), 0)
    assert s.language == "en-US"


def test_vocabulary_only_when_enabled() -> None:
    terms = [{"text": "Kubernetes", "strength": 8}]
    s = StreamSession(OPTS, 0)
    s.text(start(custom_vocabulary=terms), 0)
    assert s.vocabulary is None
    s = StreamSession(OPTS, 0)
    s.text(start(custom_vocabulary=terms, custom_vocabulary_enabled=True), 0)
    assert s.vocabulary == [("Kubernetes", 8)]


@pytest.mark.parametrize("message", [start(), json.dumps({"type": "hello"}), "[]"])
def test_only_ping_and_finish_follow_start(message: str) -> None:
    assert code_of(lambda: ready_session().text(message, 1)) is Code.invalid_message


def test_ping_answers_pong_in_every_open_state() -> None:
    s = StreamSession(OPTS, 0)
    s.text(start(), 0)
    assert s.text(json.dumps({"type": "ping"}), 0) is Reply.pong          # starting
    s.ready(1000, 0)
    assert s.text(json.dumps({"type": "ping"}), 0) is Reply.pong          # ready


def test_finish_while_starting_is_served_once_ready() -> None:
    s = StreamSession(OPTS, 0)
    s.text(start(), 0)
    assert s.text(json.dumps({"type": "finish"}), 0.1) is Reply.nothing
    assert s.finish_requested
    s = ready_session()
    s.begin_finish()
    assert s.text(json.dumps({"type": "finish"}), 1) is Reply.nothing     # a repeat


def test_audio_only_after_ready() -> None:
    s = StreamSession(OPTS, 0)
    assert code_of(lambda: s.audio(FRAME, 0)) is Code.audio_before_ready
    s.text(start(), 0)
    assert code_of(lambda: s.audio(FRAME, 0)) is Code.audio_before_ready


@pytest.mark.parametrize("frame, code", [
    (b"", Code.invalid_audio_frame), (bytes(641), Code.invalid_audio_frame),
    (bytes(OPTS.max_frame_bytes + 2), Code.frame_too_large),
])
def test_bad_frames(frame: bytes, code: Code) -> None:
    assert code_of(lambda: ready_session().audio(frame, 0)) is code


def test_a_largest_frame_is_accepted() -> None:
    assert len(ready_session().audio(bytes(OPTS.max_frame_bytes), 0).pcm) == OPTS.max_frame_bytes


def test_real_time_pacing_with_a_burst() -> None:
    s = ready_session()
    t = 0.0
    for _ in range(3000):                      # 60 s at exactly real time: never refused
        s.audio(FRAME, t)
        t += 0.02
    s = ready_session()
    burst_frames = OPTS.burst_ms // 20        # a 2 s burst at once is allowed
    for _ in range(burst_frames):
        s.audio(FRAME, 0.0)
    assert code_of(lambda: [s.audio(FRAME, 0.0) for _ in range(10)]) \
        is Code.realtime_rate_exceeded


def test_twice_real_time_is_refused_once_the_burst_is_spent() -> None:
    s = ready_session()
    with pytest.raises(StreamError) as err:
        for k in range(1000):
            s.audio(FRAME, k * 0.01)
    assert err.value.code is Code.realtime_rate_exceeded
    assert 1.8 < k * 0.01 < 2.3                # about burst_ms of audio ahead


def test_the_session_limit_cuts_the_audio_and_ends_the_session() -> None:
    s = ready_session(limit_ms=50)
    assert not s.audio(FRAME, 0).limit_reached
    assert not s.audio(FRAME, 0.02).limit_reached
    last = s.audio(FRAME, 0.04)
    assert last.limit_reached and len(last.pcm) == 10 * BYTES_PER_MS
    assert s.audio_ms == 50 and s.billed_ms == 50
    s.begin_finish()
    assert s.audio(FRAME, 0.06).pcm == b"" and s.audio_ms == 50    # after it: ignored


def test_audio_after_finish_is_not_counted() -> None:
    s = ready_session()
    s.audio(FRAME, 0)
    s.begin_finish()
    assert s.audio(FRAME, 0.02).pcm == b"" and s.audio(b"", 0.04).pcm == b""
    assert s.audio_ms == 20 and s.billed_ms == 20


def test_start_deadline() -> None:
    s = StreamSession(OPTS, 0)
    assert s.overdue(OPTS.start_timeout_s - 0.1) is None
    assert s.overdue(OPTS.start_timeout_s + 0.1).code is Code.invalid_start
    s.text(start(), 1)
    assert s.overdue(OPTS.start_timeout_s + 0.1) is None


def test_idle_deadline_is_reset_by_any_message() -> None:
    s = ready_session()
    idle = OPTS.idle_timeout_s
    s.audio(FRAME, idle - 1)
    assert s.overdue(2 * idle - 1.5) is None
    s.text(json.dumps({"type": "ping"}), 2 * idle - 1.5)
    assert s.overdue(3 * idle - 2) is None
    assert s.overdue(3 * idle).code is Code.idle_timeout
    s.begin_finish()
    assert s.overdue(10 * idle) is None         # finishing: the finish timeout applies


def test_a_silent_worker_ends_the_session_with_1013() -> None:
    s = ready_session()
    send(s, 1.0)
    send(s, 1.1)
    assert s.overdue(1.0 + OPTS.stall_timeout_s - 0.1) is None
    s.acknowledged(1)
    assert s.overdue(1.05 + OPTS.stall_timeout_s) is None
    error = s.overdue(1.1 + OPTS.stall_timeout_s + 0.1)
    assert error.code is Code.a5sv2_unavailable and error.close_code == 1013
    s.acknowledged(2)
    assert s.overdue(1.1 + OPTS.stall_timeout_s + 0.1) is None


def test_audio_the_worker_lacks_is_sent_again_from_the_first_record_it_lacks() -> None:
    s = ready_session()
    after = OPTS.resend_after_s
    for n in range(4):
        send(s, 1.0 + n * 0.1)                   # records 1-4
    s.acknowledged(1)                            # record 2 never reached the worker
    assert s.resend_due(1.1 + after - 0.05) is None
    assert s.resend_due(1.1 + after + 0.05) == 2
    assert [r.seq for r in s.unacknowledged(2)] == [2, 3, 4]
    assert s.resend_due(1.1 + after + 0.1) is None      # not again at once ...
    assert s.resend_due(1.1 + 2 * after + 0.1) == 2      # ... but after as long again
    s.acknowledged(4)
    assert s.resend_due(100.0) is None
    send(s, 101.0)
    s.begin_finish()
    assert s.resend_due(101.0 + after + 0.1) == 5        # the final record too
    s.close()
    assert s.resend_due(200.0) is None


def test_ready_after_the_session_ended_is_refused() -> None:
    s = StreamSession(OPTS, 0)
    s.text(start(), 0)
    s.close()
    assert not s.ready(1000, 1)


def test_transcripts_flow_freely_and_may_shrink_without_a_takeover() -> None:
    s = ready_session()
    assert s.show("So I went to the", False)
    assert s.show("So I went.", True)                      # a final may be shorter
    assert s.release_held() is None


def test_after_a_takeover_shorter_transcripts_wait_for_the_replay_to_catch_up() -> None:
    s = ready_session()
    assert s.show("So I finally went to the new bakery", True)
    s.worker_replaying()
    assert not s.show("So I", False)                        # the replay is behind
    assert not s.show("So I finally went", True)
    assert s.show("So I finally went to the new bakery on", False)
    assert s.show("So I finally went.", True)               # caught up: flows freely again
    s.worker_replaying()
    assert not s.show("So", False)
    assert s.release_held() == ("So", False)                # the closing text is sent anyway
    assert s.release_held() is None
