"""Scoring of the realtime coverage benchmark: utterances never shown, invented tails."""

from __future__ import annotations

from pathlib import Path

import jiwer

from evaluation.coverage import dev_items, invented_tail, matched_words, score_utterances
from evaluation.text import numbers_joined

EVAL = Path(__file__).parents[2].parent / "shared" / "eval"


def test_an_utterance_left_out_is_never_shown() -> None:
    turns = ["So I finally went to the bakery.", "Really?", "They bake two hundred loaves."]
    scores = score_utterances(turns, "So I finally went to the bakery. They bake 200 loaves.")
    assert [s.never_shown for s in scores] == [False, True, False]
    assert [s.matched for s in scores] == [7, 0, 4]          # numbers compared as digits


def test_digits_written_apart_are_one_number_on_both_sides() -> None:
    # Whisper's normaliser makes "five five" "55" but "5, 5" "5 5": scored apart, the
    # prompt was never shown although every digit was right.
    for said in ("5, 5", "5 5.", "Five, five."):
        assert not score_utterances(["five five"], said)[0].never_shown, said
    assert score_utterances(["five five"], "5 5 5 5 5")[0].never_shown   # a loop is still wrong
    assert score_utterances(["it is four five seven"], "It is 4 5 7.")[0].matched == 3
    assert score_utterances(["eighth"], "8.")[0].never_shown             # eight is not eighth


def test_punctuation_left_alone_by_the_normaliser_is_not_a_word() -> None:
    assert numbers_joined("Calling...") == "calling"
    assert numbers_joined("It cost $5... okay") == "it cost $5 okay"


def test_of_equally_short_alignments_the_one_matching_most_words_counts() -> None:
    # conv03_overlap: "Really?" spoken over the end of the other voice's sentence.
    turns = ["and the line was out the door.", "Really?", "Yes, and I waited."]
    scores = score_utterances(turns, "And the line won out really all. Yes, and I waited.")
    assert [s.matched for s in scores] == [4, 1, 4]
    ref, hyp = "a b c d e".split(), "a x c e".split()
    assert matched_words(ref, hyp) == [0, 2, 4]
    assert jiwer.wer(" ".join(ref), " ".join(hyp)) == 2 / 5       # the same edits


def test_mostly_lost_counts_half_the_words() -> None:
    scores = score_utterances(["apples pears plums figs"], "apples")
    assert scores[0].mostly_lost and not scores[0].never_shown
    assert score_utterances(["a word"], "")[0].never_shown


def test_invented_tail_is_what_follows_the_last_heard_word() -> None:
    assert invented_tail("ask what you can do for your country",
                         "Ask what you can do for your country. Thank you.") == "thank you"
    assert invented_tail("calling", "Calling...") == ""
    assert invented_tail("go forward ten meters", "Go forward, 10 meters.") == ""


def test_dev_items_cover_conversations_recordings_and_prompts() -> None:
    items = dev_items(EVAL, prompts=5)
    groups = {i.group for i in items}
    assert {"conversation", "whisper", "pocketsphinx", "asterisk_16k"} <= groups
    conv03 = next(i for i in items if i.path.endswith("conv03_overlap.wav"))
    assert len(conv03.utterances) == 14 and conv03.utterances[-1].endswith("half past seven.")
    assert sum(i.group == "asterisk_16k" for i in items) == 5
