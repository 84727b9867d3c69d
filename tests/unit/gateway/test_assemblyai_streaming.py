"""``/v3/ws`` without a stack: the connection's parameters, the error mapping and the turns."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlsplit

import pytest
from assemblyai.streaming.v3 import StreamingParameters
from assemblyai.streaming.v3._base import _build_uri

from gateway.assemblyai_streaming import V3Refusal, _V3Session, connect_params, v3_error
from gateway.assemblyai_turns import CONFIDENCE, TurnRules, TurnTracker, unformatted, word_times
from schemas.assemblyai_streaming import V3_REFUSED
from schemas.errors import StreamError, StreamErrorCode, Unauthorized
from schemas.settings import RealtimeSettings


def query_of(**params: object) -> dict[str, list[bytes]]:
    """The query string the SDK builds for these parameters, as tornado parses it."""
    uri = _build_uri("ws://127.0.0.1:1", StreamingParameters(**params))  # type: ignore[arg-type]
    return {k: [v.encode() for v in vs] for k, vs in parse_qs(urlsplit(uri).query).items()}


# --- parameters -------------------------------------------------------------------------------

def test_the_sdks_parameters_are_read() -> None:
    p = connect_params(query_of(sample_rate=16000, encoding="pcm_s16le", format_turns=True,
                                keyterms_prompt=["Kubernetes", "a5s"],
                                min_end_of_turn_silence_when_confident=300,
                                max_turn_silence=900, end_of_turn_confidence_threshold=0.6,
                                speech_model="universal-streaming-english",
                                language_code="en"))
    assert p.format_turns is True and p.keyterms_prompt == ["Kubernetes", "a5s"]
    assert (p.min_turn_silence, p.max_turn_silence) == (300, 900)
    assert p.end_of_turn_confidence_threshold == 0.6
    defaults = connect_params(query_of(sample_rate=16000))
    assert (defaults.min_turn_silence, defaults.max_turn_silence, defaults.format_turns,
            defaults.end_of_turn_confidence_threshold) == (400, 1280, False, 0.4)


@pytest.mark.parametrize("name", sorted(V3_REFUSED))
def test_each_refused_parameter_says_why(name: str) -> None:
    with pytest.raises(V3Refusal) as caught:
        connect_params({"sample_rate": [b"16000"], name: [b"True"]})
    assert caught.value.code == 3006
    assert caught.value.message == (f"Invalid Parameter: {name} is not supported: "
                                    f"{V3_REFUSED[name]}.")
    # the empty values change nothing
    connect_params({"sample_rate": [b"16000"], name: [b"False"]})


@pytest.mark.parametrize("params, said", [
    ({"speech_model": "universal-streaming-multilingual"}, "English only"),
    ({"language_code": "es"}, "English only"),
    ({"language_codes": ["en", "fr"]}, "'fr' is not supported"),
    ({"encoding": "pcm_mulaw"}, "pcm_s16le"),
    ({"sample_rate": 8000}, "16000 Hz"),
    ({"keyterms_prompt": [f"term{i}" for i in range(65)]}, "keyterms_prompt"),
    ({"max_turn_silence": -1}, "max_turn_silence"),
])
def test_values_a5s_cannot_honour(params: dict, said: str) -> None:
    params.setdefault("sample_rate", 16000)
    query = query_of(**params) if "language_codes" not in params else {
        "sample_rate": [b"16000"], "language_codes": [json.dumps(params["language_codes"])
                                                      .encode()]}
    with pytest.raises(V3Refusal) as caught:
        connect_params(query)
    assert caught.value.code == 3006 and said in caught.value.message, caught.value.message


def test_unknown_parameter_refused() -> None:
    with pytest.raises(V3Refusal, match="unknown parameter 'colour'"):
        connect_params({"colour": [b"blue"]})


def test_errors_map_to_v3_close_codes() -> None:
    assert v3_error(Unauthorized("Invalid API key.")).code == 1008
    quota = StreamErrorCode.quota_unavailable
    assert v3_error(StreamError(quota, "At most 5 streaming sessions may be live at once.")
                    ).code == 3009
    assert v3_error(StreamError(quota, "The account's usage limit is used up.")).code == 1008
    assert v3_error(StreamError(StreamErrorCode.realtime_rate_exceeded, "x")).code == 3007
    assert v3_error(StreamError(StreamErrorCode.idle_timeout, "x")).code == 4031
    assert v3_error(StreamError(StreamErrorCode.a5sv2_unavailable, "x")).code == 1013
    assert v3_error(RuntimeError("boom")).code == 3005


# --- turns ------------------------------------------------------------------------------------

def test_unformatted_and_word_times() -> None:
    assert unformatted("Hello, Dr. Smith's twenty-one cats!") == "hello dr smith's twenty-one cats"
    assert word_times(["ab", "abcd"], 1.0, 1.6) == [(1000, 1200), (1200, 1600)]


def test_a_turn_grows_then_ends_after_the_silence_then_formatted() -> None:
    t = TurnTracker(TurnRules(format_turns=True))
    out = t.transcript("Hello there", False, 0.2, 1.0, 1.0)
    assert [(m.end_of_turn, m.transcript) for m in out] == [(False, "hello there")]
    assert not out[0].words[0].word_is_final
    out = t.transcript("Hello there, friend.", True, 0.2, 1.5, 1.7)   # 0.2 s of silence
    assert [(m.end_of_turn, m.transcript) for m in out] == [(False, "hello there friend")]
    assert t.heard(1.89) == []
    ended = t.heard(1.9)                                              # 0.4 s: confident
    assert [(m.end_of_turn, m.turn_is_formatted, m.transcript) for m in ended] == [
        (True, False, "hello there friend"), (True, True, "Hello there, friend.")]
    assert ended[0].end_of_turn_confidence == CONFIDENCE[True]
    assert all(w.word_is_final for w in ended[1].words)
    assert [w.start for w in ended[1].words][0] == 200 and ended[1].words[-1].end == 1500
    out = t.transcript("Hello there, friend. And you", False, 3.0, 3.5, 3.5)
    assert [(m.turn_order, m.transcript) for m in out] == [(1, "and you")]


def test_an_open_sentence_waits_for_max_turn_silence_and_speech_keeps_it_open() -> None:
    t = TurnTracker(TurnRules(min_silence_ms=100, max_silence_ms=1000))
    t.transcript("so I was thinking", True, 0.0, 1.0, 1.2)
    assert t.heard(1.9) == []                             # not confident: 1 s needed
    t.transcript("so I was thinking that", False, 1.8, 2.2, 2.2)   # speech resumed
    assert t.heard(2.5) == []
    out = t.transcript("so I was thinking that we go.", True, 1.8, 2.6, 2.8)  # 0.2 s silent
    assert [(m.end_of_turn, m.transcript) for m in out] == [
        (False, "so i was thinking that we go"), (True, "so i was thinking that we go")]


def test_force_endpoint_and_settings_changed_mid_session() -> None:
    t = TurnTracker(TurnRules())
    t.transcript("one two three", False, 0.0, 1.0, 1.0)
    forced = t.force()
    assert [(m.end_of_turn, m.transcript, m.turn_order) for m in forced] == [
        (True, "one two three", 0)]
    assert t.force() == []                                # nothing heard since
    # the engine settles the segment with one word more: that word starts the next turn
    out = t.transcript("One, two, three, four.", True, 0.0, 1.4, 1.5)
    assert [m.transcript for m in out] == ["four"]
    t.rules.min_silence_ms = 2000                         # UpdateConfiguration
    assert t.heard(2.0) == []
    assert [m.transcript for m in t.heard(3.4)] == ["four"]


def test_the_end_of_the_stream_ends_the_turn() -> None:
    t = TurnTracker(TurnRules(max_silence_ms=5000))
    t.transcript("and then", True, 0.0, 0.8, 0.9)
    ended = t.finish()
    assert [(m.end_of_turn, m.transcript) for m in ended] == [(True, "and then")]
    assert ended[0].end_of_turn_confidence == CONFIDENCE[False]


def test_v3_paces_audio_in_all_since_connecting() -> None:
    session = _V3Session(RealtimeSettings(), 0.0)
    session.text(json.dumps({"type": "start"}), 0.0)
    assert session.ready(300_000, 0.5)
    second = bytes(32_000)                                 # 1 s of audio
    session.audio(second, 0.5)
    session.audio(second, 0.6)                             # 2 s by 0.6 s: the burst
    for at in (5.0, 5.0, 5.0, 5.0):                        # a 4.4 s gap, then 4 s at once
        session.audio(second, at)
    assert session.audio_ms == 6000
    session.audio(second, 5.0)                             # 7 s by 5 s: the burst's edge
    with pytest.raises(StreamError) as caught:
        session.audio(second, 5.0)                         # 8 s by 5 s
    assert caught.value.code is StreamErrorCode.realtime_rate_exceeded
    assert "Received 8.0 s of audio in 5.0 s since connecting" in caught.value.message
