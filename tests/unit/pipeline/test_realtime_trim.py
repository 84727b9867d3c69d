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


def test_a_session_waiting_for_the_models_keeps_its_log_until_it_opens_or_gives_up() -> None:
    trim = LogTrim(keep_s=15, wait_s=30)
    trim.wait("s1", 0, 120, now=0)
    trim.wait("s1", 0, 400, now=5)  # its next record: the first origin stands
    trim.wait("s2", 1, 50, now=10)
    # held sessions and waiting ones together: the earliest origin of each partition
    assert trim.floors(AUDIO.topic, [(0, 300), (1, 70)], now=20) == {
        AUDIO: 120, TopicPartition(AUDIO.topic, 1): 50}
    trim.opened("s1")
    assert trim.floors(AUDIO.topic, [(0, 300)], now=25) == {
        AUDIO: 300, TopicPartition(AUDIO.topic, 1): 50}
    # s2's gateway gave up after wait_s: nothing holds partition 1 any more
    assert trim.floors(AUDIO.topic, [], now=41) == {}
    assert trim.waiting == {}


def test_a_waiting_session_holds_back_the_trim_of_its_partition() -> None:
    trim = LogTrim(keep_s=15, wait_s=30)
    trim.observe(0, {AUDIO: 500})
    trim.wait("s1", 0, 120, now=1)
    trim.observe(16, {AUDIO: 900})
    assert trim.points(16, trim.floors(AUDIO.topic, [], now=16)) == {AUDIO: 120}
    trim.observe(30, {AUDIO: 1300})
    assert trim.points(30, trim.floors(AUDIO.topic, [], now=30)) == {}, "still waiting"
    trim.observe(32, {AUDIO: 1400})
    assert trim.points(32, trim.floors(AUDIO.topic, [], now=32)) == {AUDIO: 900}, (
        "its gateway gave up after wait_s")
