"""Which offsets the batch topics are trimmed to: the workers' commits, ``log_keep_s`` late."""

from __future__ import annotations

from aiokafka import TopicPartition
from aiokafka.structs import OffsetAndMetadata

from pipeline.log_trim import consumed
from pipeline.realtime.trim import LogTrim
from topologies.graph import node


def test_only_the_held_partitions_of_the_trimmed_topics_with_a_commit_count() -> None:
    ours, public = TopicPartition("a5s.dispatch", 0), TopicPartition("a5s.transcripts.completed", 0)
    elsewhere, fresh = TopicPartition("a5s.dispatch", 1), TopicPartition("a5s.settled", 0)
    committed = {ours: OffsetAndMetadata(40, ""), public: OffsetAndMetadata(9, ""),
                 elsewhere: OffsetAndMetadata(7, ""), fresh: OffsetAndMetadata(-1, "")}
    topics = {"a5s." + t.name for t in node("trim").trims}
    assert consumed(committed, topics, held={ours, public, fresh}) == {ours: 40}


def test_a_commit_is_trimmed_to_only_once_it_is_log_keep_s_old() -> None:
    """Each pass observes the commits, then asks where to trim (``BatchLogTrim.tick``)."""
    tp = TopicPartition("a5s.dispatch", 0)
    trim = LogTrim(keep_s=30)

    def tick(now: float, offset: int) -> dict[TopicPartition, int]:
        trim.observe(now, {tp: offset})
        return trim.points(now, {})

    assert tick(0.0, 10) == {} and tick(20.0, 25) == {}
    assert tick(30.0, 25) == {tp: 10}, "what was committed 30 s before, not since"
    assert tick(40.0, 31) == {}
    assert tick(50.0, 31) == {tp: 25}


def test_the_public_and_live_topics_are_not_the_batch_trim_s() -> None:
    names = {t.name for t in node("trim").trims}
    assert "transcripts.completed" not in names and not any("realtime" in n for n in names)
    assert names == {t.name for t in node("accounts").reads + node("decode").reads
                     + node("chunk").reads + node("transcribe").reads + node("diarize").reads
                     + node("finalize").reads + node("publish").reads + node("webhooks").reads}
