"""The streaming recognizer on real speech: partials, finals, whole-text updates, vocabulary.

Audio is fed in 20 ms frames as fast as the recognizer takes it (not at real-time pace);
``python -m bench.streaming`` measures latency and keep-up at real-time pace.
"""

from __future__ import annotations

import asyncio
import io
import threading
import time
from pathlib import Path

import jiwer
import numpy as np
import pytest

from pipeline.audio import decode_to_pcm
from pipeline.realtime import (Decoded, DecodeInput, DecodeOptions, EngineOptions,
                               RealtimeEngine, RecognizerOptions, SessionRecognizer,
                               StreamingModels, Update, VadOptions, Vocabulary, VocabularyTerm)
from pipeline.realtime.agent import engine_options
from pipeline.realtime.audio_buffer import AudioBuffer
from pipeline.realtime.decoder import drop_restated_tail, merge_overlap
from pipeline.realtime.engine import (final_decode_options, partial_rest, partials_held,
                                      within_sessions)
from pipeline.realtime.recognizer import DecodeKind, invented
from schemas.errors import StreamError, StreamErrorCode
from schemas.settings import Settings

from asr_support import EVAL, JFK, words_of

FRAME = 640
"""Bytes in a 20 ms frame of 16 kHz s16le."""

JFK_TEXT = ("and so my fellow americans ask not what your country can do for you "
            "ask what you can do for your country")
TIMIT = EVAL / "real" / "deepspeech" / "LDC93S1.wav"
TIMIT_TEXT = "she had your dark suit in greasy wash water all year"
CONV03 = EVAL / "synthetic" / "conv03_overlap.wav"
CONV01 = EVAL / "synthetic" / "conv01_support_call.wav"


def pcm_of(path: Path, lead_s: float = 0.5, tail_s: float = 1.0) -> bytes:
    """A file as 16 kHz s16le with silence before and after (decoded with PyAV)."""
    out = io.BytesIO()
    decode_to_pcm(path, out)
    return bytes(int(lead_s * 32000)) + out.getvalue() + bytes(int(tail_s * 32000))


def frames(pcm: bytes) -> list[bytes]:
    return [pcm[i:i + FRAME] for i in range(0, len(pcm), FRAME)]


def run_sync(rec: SessionRecognizer, pcm: bytes) -> tuple[list[Update], list[Update]]:
    streamed: list[Update] = []
    for frame in frames(pcm):
        streamed += rec.accept(frame)
    return streamed, rec.finish()


@pytest.fixture(scope="module")
def models(model_cache: Path) -> StreamingModels:
    return StreamingModels.from_specs(model_cache, "tiny.en")


@pytest.fixture(scope="module")
def jfk_pcm() -> bytes:
    return pcm_of(JFK)


@pytest.fixture(scope="module")
def jfk_run(models: StreamingModels, jfk_pcm: bytes) -> tuple[list[Update], list[Update]]:
    return run_sync(SessionRecognizer(models), jfk_pcm)


def test_partials_come_before_finals(jfk_run) -> None:
    streamed, _ = jfk_run
    kinds = [u.is_final for u in streamed]
    assert False in kinds and True in kinds
    assert kinds.index(False) < kinds.index(True)
    # Most segments show a partial before they settle (very short ones may not).
    finals = {u.segment for u in streamed if u.is_final}
    previewed = {u.segment for u in streamed if not u.is_final}
    assert len(finals & previewed) >= len(finals) / 2


def test_final_text_matches_reference(jfk_run) -> None:
    _, finished = jfk_run
    last = finished[-1]
    assert last.is_final
    assert jiwer.wer(JFK_TEXT, words_of(last.text)) <= 0.1, last.text
    assert last.text[0].isupper() and any(c in last.text for c in ".,!?")   # punctuated and cased


def test_every_update_carries_the_whole_text(jfk_run) -> None:
    streamed, finished = jfk_run
    settled = ""
    for u in streamed + finished:
        assert u.text.startswith(settled), (settled, u.text)
        if u.is_final:
            assert len(u.text) >= len(settled)
            settled = u.text
    segments = [u.segment for u in streamed if u.is_final]
    assert segments == sorted(segments)
    assert words_of(streamed[-1].text)        # the text is never emptied mid-stream


def test_finish_flushes_the_last_segment(models: StreamingModels, jfk_pcm: bytes) -> None:
    cut = jfk_pcm[: int(10.6 * 32000)]      # ends inside "... for your country"
    streamed, finished = run_sync(SessionRecognizer(models), cut)
    settled = [u.text for u in streamed if u.is_final]
    before = settled[-1] if settled else ""
    assert finished and finished[-1].is_final
    assert len(words_of(finished[-1].text)) > len(words_of(before))
    assert "ask what you can do for" in words_of(finished[-1].text)


def test_silence_produces_no_text(models: StreamingModels) -> None:
    rng = np.random.default_rng(1)
    noise = (rng.normal(0, 30, 3 * 16000)).astype("<i2").tobytes()    # about -60 dBFS
    streamed, finished = run_sync(SessionRecognizer(models), bytes(2 * 32000) + noise)
    assert all(not u.text for u in streamed + finished)
    assert finished == [finished[-1]] and finished[-1].is_final


def test_odd_frame_is_refused(models: StreamingModels) -> None:
    with pytest.raises(StreamError) as err:
        SessionRecognizer(models).accept(b"\x00\x01\x02")
    assert err.value.code is StreamErrorCode.invalid_audio_frame


def test_vocabulary_biases_recognition(models: StreamingModels) -> None:
    pcm = pcm_of(TIMIT)
    terms = [VocabularyTerm(text="dark suit", strength=8), VocabularyTerm(text="wash water", strength=8)]
    _, finished = run_sync(SessionRecognizer(models, terms), pcm)
    text = words_of(finished[-1].text)
    assert "dark suit" in text and "wash water" in text, text
    assert jiwer.wer(TIMIT_TEXT, text) <= 0.1


def test_vocabulary_correction_scales_with_strength() -> None:
    strong = Vocabulary([VocabularyTerm(text="Kubernetes", strength=12)])
    weak = Vocabulary([VocabularyTerm(text="Kubernetes", strength=1)])
    assert strong.correct("We run Cuber Netties, mostly.") == "We run Kubernetes, mostly."
    assert weak.correct("We run Cuber Netties, mostly.") == "We run Cuber Netties, mostly."
    assert weak.correct("we run kubernetes") == "we run Kubernetes"          # casing only
    assert strong.correct("The committee met.") == "The committee met."       # no false hit
    assert Vocabulary([VocabularyTerm(text="x", strength=0)]).prompt_text == ""


def test_audio_buffer_stays_bounded() -> None:
    buf = AudioBuffer(1000)
    for i in range(50):
        buf.append(np.full(64, i, dtype=np.float32))
        buf.drop_before(buf.end - 300)
    assert buf.end == 3200 and buf.end - buf.start <= 1000
    tail = buf.slice(buf.end - 64, buf.end)
    assert np.all(tail == 49)


async def test_engine_runs_sessions_concurrently_off_the_loop(models: StreamingModels,
                                                               jfk_pcm: bytes) -> None:
    engine = RealtimeEngine(models, EngineOptions(max_sessions=2))
    sessions = {"a": jfk_pcm, "b": pcm_of(TIMIT)}
    for sid in sessions:
        engine.open(sid)
    with pytest.raises(StreamError) as err:
        engine.open("c")
    assert err.value.code is StreamErrorCode.a5sv2_unavailable

    async def stream(sid: str, pcm: bytes) -> tuple[list[Update], list[Update]]:
        got: list[Update] = []
        for frame in frames(pcm):
            got += await engine.accept(sid, frame)
            await asyncio.sleep(0.005)           # about 4x real time
        return got, await engine.finish(sid)

    try:
        (jfk_stream, jfk_done), (timit_stream, timit_done) = await asyncio.gather(
            *(stream(sid, pcm) for sid, pcm in sessions.items()))
        names = {t.name for t in threading.enumerate()}
    finally:
        for sid in sessions:
            engine.close(sid)
        await engine.aclose()
    assert jiwer.wer(JFK_TEXT, words_of(jfk_done[-1].text)) <= 0.1
    assert jiwer.wer(TIMIT_TEXT, words_of(timit_done[-1].text)) <= 0.35
    assert any(u.is_final for u in jfk_stream)       # settled while streaming, not only at finish
    assert any(n.startswith("a5s-realtime-decode") for n in names)
    assert any(n.startswith("a5s-realtime-vad") for n in names)


async def test_engine_refuses_new_sessions_while_its_finals_lag(models: StreamingModels) -> None:
    """Past ``admit_floor``, a new session is refused while the finals lag more than the
    limit (one that nothing can meet here); a session moved from another worker is not."""
    engine = RealtimeEngine(models, EngineOptions(max_sessions=4, admit_floor=2,
                                                  admit_final_lag_s=1e-3,
                                                  admit_window_s=600))
    try:
        assert engine.final_lag() is None
        engine.open("a", new=True)
        for frame in frames(pcm_of(CONV01)):
            await engine.accept("a", frame)
        finals = [u for u in await engine.finish("a") if u.is_final]
        lag = engine.final_lag()
        assert finals and lag is not None and 0 < lag < 60
        engine.open("b", new=True)                     # under the floor: taken
        with pytest.raises(StreamError) as err:
            engine.open("c", new=True)
        assert err.value.code is StreamErrorCode.a5sv2_unavailable
        assert "behind" in err.value.message
        engine.open("moved")                           # a session taken over is not refused
        assert engine.session_count == 3
    finally:
        await engine.aclose()


def test_overlapping_speech_is_not_dropped(models: StreamingModels) -> None:
    """conv03 speaks without pauses and overlaps speakers: segments run long and Whisper
    stopped at the change of speaker, dropping the last 8 s ("Come on ... half past seven")
    and most of "They only bake two hundred loaves"."""
    _, finished = run_sync(SessionRecognizer(models), pcm_of(CONV03, 0, 0.5))
    text = words_of(finished[-1].text)
    for phrase in ("only", "worth it", "buy you a coffee", "okay okay", "meet you at the corner"):
        assert phrase in text, (phrase, text)


def test_a_decode_that_stops_early_goes_on(models: StreamingModels) -> None:
    out = io.BytesIO()
    decode_to_pcm(CONV03, out)
    audio = np.frombuffer(out.getvalue(), "<i2").astype(np.float32)[int(35.89 * 16000):
                                                                     int(45.34 * 16000)] / 32768
    decoder = models.final
    once, = decoder.decode([DecodeInput(audio, decoder.prompt())], DecodeOptions(max_continuations=0))
    whole, = decoder.decode([DecodeInput(audio, decoder.prompt())], DecodeOptions())
    assert once.continued == 0 and whole.continued >= 1
    assert len(words_of(whole.text).split()) > len(words_of(once.text).split())
    assert words_of(whole.text).startswith(words_of(once.text))
    assert "half" in words_of(whole.text)


MEND = EVAL / "real" / "speechbrain" / "spk2_snt4.wav"
""""Mend the coat before you go out": base writes "Men" and end-of-text, with no timestamp
after it (on an AMD EPYC host, the whole sentence and end-of-text, still no timestamp)."""


@pytest.fixture(scope="module")
def base_models(model_cache: Path) -> StreamingModels:
    return StreamingModels.from_specs(model_cache, "tiny.en", "base")


@pytest.mark.parametrize("beam", [1, 5])
def test_an_early_stop_without_a_timestamp_goes_on(base_models: StreamingModels, beam: int,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.BytesIO()
    decode_to_pcm(MEND, out)
    audio = np.frombuffer(out.getvalue(), "<i2").astype(np.float32) / 32768
    for decoder in (base_models.final, base_models.partial):
        prompt = decoder.prompt()
        once, = decoder.decode([DecodeInput(audio, prompt)],
                               DecodeOptions(beam_size=beam, max_continuations=0))
        # A spy, not a stand-in: the real pass runs on the real model; only the beam each
        # pass was given is recorded, since the text alone cannot show it.
        beams: list[int] = []
        one_pass = decoder._pass
        monkeypatch.setattr(decoder, "_pass", lambda inputs, o: beams.append(o.beam_size)
                            or one_pass(inputs, o))
        whole, = decoder.decode([DecodeInput(audio, prompt)], DecodeOptions(beam_size=beam))
        monkeypatch.undo()
        assert "coat before you go out" in words_of(whole.text), (decoder.model_dir, whole)
        assert words_of(whole.text).count("coat") == 1, whole     # no loop appended
        if decoder is base_models.final:
            # base ends this pass with no timestamp: after "Men" on the Intel hosts, after the
            # whole sentence on an AMD EPYC host (CTranslate2's kernels differ). Either way the
            # rest is decoded once, and adds no loop.
            assert whole.continued == 1 and words_of(once.text).startswith("men")
            assert words_of(whole.text).startswith(words_of(once.text))
            assert beams == [beam, 1]           # the beam for the decode, greedy for its rest
        else:                                   # tiny.en gets it in one decode, as before
            assert once.text == whole.text and whole.continued == 0


FIVE_FIVE = EVAL / "real" / "pocketsphinx" / "cards" / "004.wav"
""""five five", speech to 1.34 s of 1.55 s: in a 10 s encoder window tiny.en loops on it
("5, 5, 5, ...") for most cuts of its end."""


def test_a_runaway_decode_is_decoded_again_in_the_full_window(models: StreamingModels) -> None:
    """The segment the VAD closes when silence follows (start padding to the end padding):
    greedy tiny.en in the short window runs to the token budget; that runaway is decoded
    again in Whisper's 30 s window."""
    audio = np.frombuffer(pcm_of(FIVE_FIVE, 0, 0), "<i2").astype(np.float32)[1920:24064] / 32768
    decoder = models.final
    looped, = decoder.decode([DecodeInput(audio, decoder.prompt())],
                             DecodeOptions(runaway_window_frames=0))
    assert words_of(looped.text).split().count("5") > 2 and not looped.widened, looped
    again, = decoder.decode([DecodeInput(audio, decoder.prompt())], DecodeOptions())
    assert again.widened and words_of(again.text) == "5 5", again


@pytest.mark.parametrize("tail_s", [0.0, 1.0])
def test_five_five_is_not_looped_through_the_stream(models: StreamingModels, tail_s: float) -> None:
    """The file as a client streams it in whole 20 ms frames (the last 14 ms dropped) and
    ended by ``finish``, or followed by silence that closes the segment: both final decodes
    looped to "5, 5, 5, 5, 5" (the whole file, to its last sample, happened to give "5 5.")."""
    pcm = pcm_of(FIVE_FIVE, 0, tail_s)
    _, updates = drive(SessionRecognizer(models), pcm[:len(pcm) // FRAME * FRAME])
    assert words_of(updates[-1].text) == "5 5", updates[-1]


def test_a_restated_unfinished_tail_is_a_loop() -> None:
    assert drop_restated_tail("and the coat before you go out. and the coat before") == \
        "and the coat before you go out."
    for kept in ("I went home. I came back", "Yes. Yes yes", "one sentence", "Go. Go."):
        assert drop_restated_tail(kept) == kept


def test_a_continuation_does_not_repeat_the_word_it_starts_on() -> None:
    assert merge_overlap("Come on, it will be", "be worth it.") == "Come on, it will be worth it."
    assert merge_overlap("it will be", "will be worth it") == "it will be worth it"
    assert merge_overlap("men", "and the coat") == "men and the coat"


def test_invented_text_is_dropped_but_heard_text_kept() -> None:
    opts = DecodeOptions()
    sure, unsure = Decoded("", 0.05, -0.2), Decoded("", 0.7, -0.9)
    assert invented("Thank you.", unsure, 0.3, opts)
    assert invented("Thank you.", sure, 0.3, opts)               # too little speech for it
    assert not invented("Thank you.", sure, 1.2, opts)           # said clearly
    assert invented("So we went.", unsure, 0.2, opts)            # doubtful, hardly any speech
    assert not invented("Added.", unsure, 0.4, opts)             # one short word, heard
    assert not invented("So we went home after the game.", unsure, 2.5, opts)
    assert not invented("Thank you for calling.", sure, 0.4, opts)


def test_the_end_of_a_stream_invents_nothing(models: StreamingModels, jfk_pcm: bytes) -> None:
    """Whisper ended jfk.flac with "Thank you." when the stream closed on a breath of noise."""
    rng = np.random.default_rng(7)
    tail = (rng.normal(0, 300, int(0.4 * 16000))).astype("<i2").tobytes()
    _, finished = run_sync(SessionRecognizer(models), jfk_pcm + tail)
    text = words_of(finished[-1].text)
    assert text.endswith("for your country"), text
    assert jiwer.wer(JFK_TEXT, text) <= 0.1


def drive(rec: SessionRecognizer, pcm: bytes, ranges: list[tuple[float, float]] | None = None,
          early: bool = True) -> tuple[list[DecodeKind], list[Update]]:
    """Stream ``pcm`` frame by frame, running finals and speculative finals (no partials) the
    moment the recognizer asks for them, as an idle engine would (``early``: whether it asks
    early speculative decodes). Returns the kinds of the decodes run and every update, the
    closing ones included; ``ranges`` gets the audio range of each decode, s."""
    kinds: list[DecodeKind] = []
    updates: list[Update] = []

    def decode_due() -> None:
        while (req := rec.take_final() or rec.take_prefinal(early=early)) is not None:
            kinds.append(req.kind)
            if ranges is not None:
                ranges.append((req.start / 16000, req.end / 16000))
            decoded = req.decoder.decode([req.input], rec.decode_options(req.kind))[0]
            updates.extend(rec.complete(req, decoded))

    for frame in frames(pcm):
        samples, probs = rec.detect(frame)
        updates.extend(rec.advance(samples, probs))
        decode_due()
    updates.extend(rec.end_of_stream())
    decode_due()
    if not updates or not updates[-1].is_final:
        updates.append(rec.closing_update())
    return kinds, updates


def test_a_held_silence_settles_on_the_speculative_decode(models: StreamingModels,
                                                         jfk_pcm: bytes) -> None:
    """Each pause in jfk.flac is long enough to close its segment: the decode started when
    the silence began is the final, and no decode is left to run after the close."""
    kinds, updates = drive(SessionRecognizer(models), jfk_pcm)
    finals = [u for u in updates if u.is_final]
    assert len(finals) >= 3
    assert DecodeKind.FINAL not in kinds, kinds           # every final was ready at the close
    assert kinds.count(DecodeKind.PREFINAL) >= len({u.segment for u in finals})
    assert jiwer.wer(JFK_TEXT, words_of(finals[-1].text)) <= 0.1, finals[-1].text


def test_a_quiet_padding_settles_on_the_early_decode(models: StreamingModels) -> None:
    """The early speculative decode starts before the end padding has arrived; when that
    padding turns out quiet (here digital silence after the phrase), it is the final and the
    padded audio is never decoded. With the early decode off (the recognizer's default), or
    not asked by a busy engine, the padded one runs."""
    pcm = pcm_of(TIMIT, 0.5, 1.0)
    ranges: list[tuple[float, float]] = []
    early = RecognizerOptions(vad=VadOptions(early_pad_ms=64))
    kinds, updates = drive(SessionRecognizer(models, (), early), pcm, ranges)
    final = [u for u in updates if u.is_final and u.text][0]
    assert DecodeKind.FINAL not in kinds, kinds
    assert ranges and all(end < final.end - 0.05 for _, end in ranges), (ranges, final)
    assert jiwer.wer(TIMIT_TEXT, words_of(final.text)) <= 0.2, final.text

    for rec, asked in ((SessionRecognizer(models), True),                 # off
                       (SessionRecognizer(models, (), early), False)):   # not asked by the engine
        late: list[tuple[float, float]] = []
        _, updates = drive(rec, pcm, late, early=asked)
        final = [u for u in updates if u.is_final and u.text][0]
        assert any(abs(end - final.end) < 1e-6 for _, end in late), (late, final)
        assert all(end >= final.end - 1e-6 for _, end in late), (late, final)


def test_the_service_s_early_finals_keep_jfk_whole(models: StreamingModels,
                                                  jfk_pcm: bytes) -> None:
    """With the service's options, early decodes settle jfk.flac's phrases: most padded
    decodes never run, and the text is as good as the padded decodes' (the isolated "Ask
    not" may come out "AS NOT" either way, as its cut moves by 10 ms)."""
    options = engine_options(Settings()).recognizer
    assert options.vad.early_pad_ms > 0
    early: list[tuple[float, float]] = []
    _, updates = drive(SessionRecognizer(models, (), options), jfk_pcm, early)
    padded: list[tuple[float, float]] = []
    off = options.model_copy(update={"vad": options.vad.model_copy(update={"early_pad_ms": 0})})
    _, late = drive(SessionRecognizer(models, (), off), jfk_pcm, padded)
    finals = [u for u in updates if u.is_final]
    ends = {end for _, end in padded}
    assert len(ends - {end for _, end in early}) >= 3, (early, padded)  # not decoded padded
    assert jiwer.wer(JFK_TEXT, words_of(finals[-1].text)) <= 0.1, finals[-1].text
    assert [u.segment for u in finals] == [u.segment for u in late if u.is_final]


def test_a_partial_never_stands_for_the_final(models: StreamingModels) -> None:
    """Speech to the last sample: the stream's end closes the segment where the last
    partial ended. That partial (smaller window, one continuation) must not be the final:
    the final is decoded with the final options."""
    rec = SessionRecognizer(models)
    pcm = pcm_of(TIMIT, 0.5, 0)
    for frame in frames(pcm):
        samples, probs = rec.detect(frame)
        rec.advance(samples, probs)
    req = rec.take_partial()
    assert req is not None and req.end == len(pcm) // 2
    rec.complete(req, req.decoder.decode([req.input], rec.decode_options(req.kind))[0])
    assert rec.end_of_stream() == []
    final = rec.take_final()
    assert final is not None and (final.start, final.end) == (req.start, req.end)
    updates = rec.complete(final, final.decoder.decode([final.input], rec.decode_options(final.kind))[0])
    assert updates[-1].is_final
    assert jiwer.wer(TIMIT_TEXT, words_of(updates[-1].text)) <= 0.2, updates[-1].text


def test_speech_resuming_discards_the_speculative_decode(models: StreamingModels) -> None:
    """A pause longer than the end padding but shorter than the end-silence starts a
    speculative decode of the first phrase only; speech resumes, so that result must not
    settle the segment, and the final carries both phrases."""
    opts = RecognizerOptions(vad=VadOptions(min_silence_ms=700, speech_pad_ms=96))
    gap = bytes(int(0.45 * 32000))                       # about 0.4 s judged silent
    pcm = pcm_of(TIMIT, 0.5, 0) + gap + pcm_of(JFK, 0, 1.0)
    rec = SessionRecognizer(models, (), opts)
    kinds, updates = drive(rec, pcm)
    finals = [u for u in updates if u.is_final and u.text]
    first = finals[0]
    assert first.segment == 0 and first.start < 0.6 and first.end > 3.5, first
    text = words_of(first.text)
    # both phrases ("so my fellow americans" is "so am i fellow americans" on some CPUs)
    assert "greasy wash" in text and "fellow americans" in text, text
    # The decode of the first phrase alone ran and was dropped: more speculative decodes
    # than segments, and no final text that stops after "all year".
    assert kinds.count(DecodeKind.PREFINAL) > len({u.segment for u in finals})
    assert not any(words_of(u.text).endswith("all year") for u in finals)
    assert jiwer.wer(f"{TIMIT_TEXT} {JFK_TEXT}", words_of(finals[-1].text)) <= 0.15


def test_finals_of_their_own_model_use_the_batch_beam() -> None:
    settings = Settings()
    same = engine_options(settings)
    assert same.recognizer.decode.beam_size == 3            # tiny.en finals: a small beam
    assert same.recognizer.partial_decode.beam_size == 1
    assert same.max_sessions == settings.realtime.worker_max_sessions
    assert same.admit_final_lag_s == settings.realtime.admit_final_lag_s == 1.0
    realtime = settings.realtime.model_copy(update={"admit_final_lag_s": 0.0})
    assert engine_options(settings.model_copy(update={"realtime": realtime})
                          ).admit_final_lag_s is None                  # 0: off
    models = settings.models.model_copy(update={"streaming_final": "base", "beam_size": 4})
    own = engine_options(settings.model_copy(update={"models": models}))
    assert own.recognizer.decode.beam_size == 4            # finals and speculative finals
    assert own.wide_beam_sessions is None and same.wide_beam_sessions == 5
    assert own.recognizer.partial_decode.beam_size == 1     # partials stay greedy
    assert own.recognizer.vad == same.recognizer.vad


def test_the_early_decode_is_an_operator_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings()
    assert engine_options(settings).recognizer.vad.early_pad_ms == 64       # on by default
    models = settings.models.model_copy(update={"streaming_final": "base"})
    own = engine_options(settings.model_copy(update={"models": models}))
    assert own.recognizer.vad.early_pad_ms == 64 and own.recognizer.decode.beam_size == 5
    monkeypatch.setenv("A5S_REALTIME__EARLY_PAD_MS", "0")
    assert engine_options(Settings()).recognizer.vad.early_pad_ms == 0


def test_early_decodes_are_asked_up_to_five_sessions() -> None:
    most = EngineOptions().early_final_sessions
    assert most == 5
    assert within_sessions(5, most) and not within_sessions(6, most)
    assert within_sessions(50, None)


def test_partials_take_at_most_their_duty_of_a_thread() -> None:
    assert partial_rest(0.2, 0.5) == pytest.approx(0.2)
    assert partial_rest(0.3, 0.25) == pytest.approx(0.9)
    assert partial_rest(0.2, 1.0) == 0.0                       # duty 1: no rest


def test_finals_keep_their_beam_up_to_the_wide_beam_sessions() -> None:
    wide = EngineOptions().recognizer.decode
    assert wide.beam_size == 3 and EngineOptions().wide_beam_sessions == 5
    assert final_decode_options(wide, sessions=5, wide_sessions=5) is wide
    narrow = final_decode_options(wide, sessions=6, wide_sessions=5)
    assert narrow.beam_size == 1
    assert narrow.model_copy(update={"beam_size": 3}) == wide     # nothing else changes
    assert final_decode_options(wide, sessions=10, wide_sessions=None) is wide
    assert narrow.greedy() is narrow                               # no copy when greedy


def test_refreshed_partials_wait_for_finals_and_their_rest() -> None:
    assert partials_held(finals_running=1, beside_finals=False, now=5.0, rest_until=0.0) == float("inf")
    assert partials_held(finals_running=0, beside_finals=False, now=5.0, rest_until=5.3) == pytest.approx(0.3)
    assert partials_held(finals_running=1, beside_finals=True, now=5.0, rest_until=4.0) == 0.0
    assert partials_held(finals_running=0, beside_finals=False, now=5.0, rest_until=4.0) == 0.0


def _partial_due(rec: SessionRecognizer, pcm: bytes, shown: bool) -> None:
    """Feed ``rec`` until a partial is due, one that refreshes a shown text when ``shown``."""
    chunks = iter(frames(pcm))
    if shown:
        while not any(u.text and not u.is_final for u in rec.accept(next(chunks))):
            pass                                    # decodes inline, until a partial shows text
    while not rec.partial_due():
        rec.advance(*rec.detect(next(chunks)))      # audio only, no decode
    assert rec.partial_rank()[0] is shown


async def test_a_segments_first_partial_is_never_held_back(models: StreamingModels,
                                                           jfk_pcm: bytes) -> None:
    """While a final decode runs, or partials rest, only a segment's first partial starts."""
    engine = RealtimeEngine(models, EngineOptions(max_sessions=2, partial_batch=2))
    engine.open("shown")
    engine.open("new")
    recs = {sid: s.recognizer for sid, s in engine._sessions.items()}
    _partial_due(recs["shown"], jfk_pcm, shown=True)
    _partial_due(recs["new"], jfk_pcm, shown=False)

    def picked() -> list[str]:
        batch = engine._pick()
        for s, req in batch:
            s.in_flight -= 1
            s.recognizer.give_back(req)
        assert all(req.kind is DecodeKind.PARTIAL for _, req in batch)
        return sorted(s.id for s, _ in batch)

    try:
        assert picked() == ["new", "shown"]
        engine._finals_running = 1                  # a final decode runs
        assert picked() == ["new"]
        engine._finals_running = 0
        engine._partial_rest_until = time.monotonic() + 60.0    # partials rest
        assert picked() == ["new"]
        engine._partial_rest_until = 0.0
        assert picked() == ["new", "shown"]
    finally:
        await engine.aclose()
    one = RealtimeEngine(models, EngineOptions(max_sessions=2))   # the default: one at a time
    one.open("shown")
    one.open("new")
    _partial_due(one._sessions["shown"].recognizer, jfk_pcm, shown=True)
    _partial_due(one._sessions["new"].recognizer, jfk_pcm, shown=False)
    try:
        assert [(s.id, req.kind) for s, req in one._pick()] == [("new", DecodeKind.PARTIAL)]
    finally:
        await one.aclose()
