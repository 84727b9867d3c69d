"""Which records of the live topics the worker deletes (``pipeline.realtime.trim``)."""

from __future__ import annotations

from aiokafka import TopicPartition

from pipeline.realtime.trim import LogTrim

AUDIO = TopicPartition("a5s.realtime-audio", 0)
MESSAGES = TopicPartition("a5s.realtime-messages", 0)


def test_nothing_is_deleted_before_keep_s_has_been_seen() -> None:
    trim = LogTrim(keep_s=60)
    trim.observe(0, {AUDIO: 100, MESSAGES: 10})
    trim.observe(50, {AUDIO: 900, MESSAGES: 90})
    assert trim.points(50, {}) == {}


def test_records_older_than_keep_s_go_up_to_the_end_seen_then() -> None:
    trim = LogTrim(keep_s=60)
    for t, end in ((0, 100), (10, 200), (20, 300), (70, 1000)):
        trim.observe(t, {AUDIO: end, MESSAGES: end // 10})
    # at 70 s, the newest end at least 60 s old is the one seen at 10 s
    assert trim.points(70, {}) == {AUDIO: 200, MESSAGES: 20}
    assert trim.points(70, {}) == {}, "a trim is not repeated"
    trim.observe(80, {AUDIO: 1100, MESSAGES: 110})
    assert trim.points(80, {}) == {AUDIO: 300, MESSAGES: 30}


def test_a_held_session_keeps_its_audio_from_its_opening_record() -> None:
    trim = LogTrim(keep_s=60)
    trim.observe(0, {AUDIO: 500, MESSAGES: 50})
    trim.observe(60, {AUDIO: 900, MESSAGES: 90})
    # a session opened at offset 120 is still live: its replay needs offsets from 120
    assert trim.points(60, {AUDIO: 120}) == {AUDIO: 120, MESSAGES: 50}
    trim.observe(120, {AUDIO: 1300, MESSAGES: 130})
    assert trim.points(120, {AUDIO: 120}) == {MESSAGES: 90}
    trim.observe(130, {AUDIO: 1400, MESSAGES: 140})
    assert trim.points(130, {}) == {AUDIO: 900}, "the session ended: its audio goes"


def test_moved_partitions_wait_keep_s_again() -> None:
    trim = LogTrim(keep_s=60)
    trim.observe(0, {AUDIO: 500})
    trim.observe(60, {AUDIO: 900})
    trim.reset()
    trim.observe(61, {AUDIO: 950})
    assert trim.points(61, {}) == {}
    trim.observe(121, {AUDIO: 1500})
    assert trim.points(121, {}) == {AUDIO: 950}
