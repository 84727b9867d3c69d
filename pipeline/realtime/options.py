"""Options of the streaming recognizer and its engine.

Every field carries its unit. Defaults were tuned with ``python -m bench.streaming``
on a 2-core CPU (5 concurrent sessions must keep up in real time there).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["VadOptions", "DecodeOptions", "RecognizerOptions", "EngineOptions"]


class VadOptions(BaseModel):
    """Silero VAD endpointing (same rules as ``silero_vad.VADIterator``).

    The speculative final decode starts the moment the padded end of the phrase has been
    heard (or, with ``early_pad_ms``, sooner) and is the final when the silence then lasts
    ``min_silence_ms``. On 2 CPU cores a tiny.en final decode takes 0.10-0.13 s; with a quiet
    padding an early decode is ready by the close on an idle core, so a final waits for the
    end-silence only. A longer end-silence adds latency, a shorter one splits sentences at short pauses
    (``python -m bench.streaming --offline``, and ``--offline --coverage`` for the WER of
    every dev item).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    threshold: float = Field(0.5, gt=0, lt=1, description="Speech probability that opens speech.")
    neg_threshold_offset: float = Field(0.15, ge=0, lt=1, description=(
        "Silence is a probability below ``threshold - offset`` (hysteresis)."))
    min_silence_ms: int = Field(192, ge=32, description=(
        "End-silence that closes a segment, ms (whole 32 ms VAD windows). 300 ms settled "
        "finals 0.08 s later at the same WER; 128-160 ms with a 96 ms pad cost 1-2 WER points."))
    speech_pad_ms: int = Field(160, ge=0, description=(
        "Audio kept after the detected end, ms; the speculative final starts once this much "
        "silence has passed, so this plus one decode is the floor of final latency. 224 ms "
        "gave the same WER 0.06 s later; 96 ms cost a WER point over the dev items, and "
        "64 ms cut soft word endings (\"fellow america\" for \"fellow Americans\" in jfk.flac)."))
    early_pad_ms: int = Field(0, ge=0, description=(
        "Audio after the detected end that an *early* speculative decode covers, ms (0: "
        "none). It starts as soon as that much has been heard, with the rest of the padding "
        "decoded as silence, while the real rest arrives; when every VAD window of that rest "
        "stays under ``quiet_probability`` the early result stands for the padded segment and "
        "no decode waits for the padding. 64 ms: engine final p50 0.33 -> 0.24 s on an idle "
        "core, the same WER, +1.4% of a core per session in decodes discarded when speech "
        "resumes; off by default, since 5 sessions on 2 busy cores got no faster with it "
        "(final p50 0.56 s against 0.53 s, 14% more engine CPU). The service turns it on "
        "(``realtime.early_pad_ms``, 64) with 40 ms records and a smaller partial share."))
    quiet_probability: float = Field(0.1, gt=0, lt=1, description=(
        "See ``early_pad_ms``: the soft end of \"Americans\" in jfk.flac scored 0.12."))
    start_pad_ms: int = Field(200, ge=0, description=(
        "Audio kept before the detected start, ms: Silero needs a few windows to rise, "
        "and a clipped first word is a lost word."))


class DecodeOptions(BaseModel):
    """How one Whisper decode is run.

    The encoder sees the segment plus ``trailing_pad_frames`` of zero features instead of a
    full 30 s window: encoder time falls ~3x, and the trailing padding keeps Whisper from
    looping (a window cut right after the speech makes it repeat itself).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    beam_size: int = Field(1, ge=1, le=10, description=(
        "Beam of a decode's first pass; its continuations and the second decode of a loop "
        "are greedy (the same dev-item WER, about 15% less CPU a final at 3). 1 = greedy: "
        "what partials use. Finals default to 3 (``RecognizerOptions``)."))
    trailing_pad_frames: int = Field(500, ge=0, le=3000, description=(
        "Zero feature frames after the audio, 10 ms frames."))
    min_frames: int = Field(1000, ge=100, le=3000, description="Smallest encoder window, 10 ms frames.")
    max_tokens_per_second: float = Field(8.0, gt=0, description=(
        "Token budget per second of audio (plus 8), of which CTranslate2's Whisper generates "
        "half: cuts runaway repetition short."))
    runaway_window_frames: int = Field(3000, ge=0, le=3000, description=(
        "Encoder window, 10 ms frames, in which a decode that ran into the token budget (a "
        "loop, or a long text) is decoded once more; kept when it ends within the budget (0, "
        "or not above ``min_frames``: never). tiny.en looped on \"five five\" in a 10 s window "
        "for 22 of 49 cuts of the segment, in 30 s for none."))
    no_speech_threshold: float = Field(0.6, ge=0, le=1, description=(
        "A decode is dropped as non-speech when its no-speech probability is above this "
        "and its average log-probability is below ``log_prob_threshold``."))
    log_prob_threshold: float = Field(-1.0, description="See ``no_speech_threshold``.")
    timestamps: bool = Field(True, description=(
        "Decode with timestamp tokens, so that a decode that stops early is noticed."))
    continue_after_s: float = Field(1.0, gt=0, description=(
        "Audio left after the last timestamp beyond this, s, is decoded again: Whisper "
        "often stops at a change of speaker and would drop the rest of the segment."))
    continue_unclosed_after_s: float = Field(0.3, gt=0, description=(
        "The same, s, for a decode that stopped without a closing timestamp, measured from "
        "the start of its last word: such a stop is certain (1 s lost \"worth it\" in "
        "conv03_overlap). A rest under ``continue_after_s`` is kept only when its decode is "
        "sure (no-speech probability under ``doubtful_no_speech``, log-probability at least "
        "``log_prob_threshold``)."))
    max_continuations: int = Field(3, ge=0, le=10, description=(
        "Most re-decodes of one input's remaining audio (0: none)."))
    doubtful_no_speech: float = Field(0.5, ge=0, le=1, description=(
        "A continuation, or a segment that ends the stream, is dropped as invented text when "
        "its no-speech probability is at least this and its log-probability below "
        "``doubtful_log_prob`` (the batch recogniser's rule)."))
    doubtful_log_prob: float = Field(-0.7, description="See ``doubtful_no_speech``.")

    def greedy(self) -> DecodeOptions:
        """These options with a beam of 1 (themselves when already greedy)."""
        return self if self.beam_size == 1 else self.model_copy(update={"beam_size": 1})


class RecognizerOptions(BaseModel):
    """Per-session segmentation and partial cadence."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    vad: VadOptions = VadOptions()
    decode: DecodeOptions = Field(DecodeOptions(beam_size=3), description=(
        "Final (and speculative final) decodes. A beam of 3: tiny.en's WER over the dev items "
        "9.20% greedy, 8.53% beam 2, 7.77% beam 3, 7.86% beam 4, 7.96% beam 5 "
        "(``python -m bench.streaming --offline --coverage``), for about 7% more CPU a final."))
    partial_decode: DecodeOptions = Field(DecodeOptions(min_frames=500, max_continuations=1,
                                                        runaway_window_frames=0),
                                          description=(
        "Partial decodes: a smaller encoder window, one continuation at most and no second "
        "decode of a loop, since partials are replaced anyway."))
    first_partial_ms: int = Field(200, ge=0, description=(
        "Audio after the VAD's speech decision before the first partial decode, ms "
        "(5 sessions on 2 cores, engine level: 300 ms gave a first-partial p95 of 0.76 s, "
        "200 ms 0.60 s, with the same words)."))
    partial_interval_ms: int = Field(700, ge=100, description=(
        "Least new audio between two partial decodes of one session, ms; the engine "
        "stretches this when decodes fall behind."))
    max_segment_ms: int = Field(14000, ge=2000, le=28000, description=(
        "A segment longer than this is settled at its quietest point in the last "
        "``split_search_ms`` (keeps the buffer bounded and the window under 30 s)."))
    split_search_ms: int = Field(3000, ge=100, description="See ``max_segment_ms``.")
    preroll_ms: int = Field(600, ge=0, description="Audio kept while idle, for the start padding, ms.")


class EngineOptions(BaseModel):
    """Limits and threading of :class:`~pipeline.realtime.engine.RealtimeEngine`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_sessions: int = Field(5, ge=1, description="Sessions open at once; more are refused.")
    decode_workers: int = Field(2, ge=1, description=(
        "Threads of the named decode pool; each runs one batch at a time."))
    max_batch: int = Field(3, ge=1, description="Final decodes run together in one batch.")
    partial_batch: int = Field(1, ge=1, description=(
        "Partial decodes run together in one batch. One: a batch of three partials held a "
        "core for three decodes' time while finals waited for it (10 live sessions on 2 "
        "cores: final p95 0.88 s with 3, 0.73 s with 1)."))
    partial_workers: int | None = Field(None, ge=1, description=(
        "Decode threads that may run partials at once; the others stay free for finals. "
        "Default: all but one (all, with a single thread)."))
    partials_beside_finals: bool = Field(False, description=(
        "Whether a partial that refreshes a shown text may start while a final or "
        "speculative final decode runs (a segment's first partial always may). No: on 2 "
        "cores a partial started beside a final takes the core the final is waiting for, "
        "and partials, being coalesced, only show a little later."))
    partial_duty: float = Field(0.15, gt=0, le=1, description=(
        "Share of one decode thread's time partials may take: after a partial batch of t "
        "seconds no partial but a segment's first starts for t * (1 / duty - 1) s (1: no "
        "rest). Partials pace themselves by their own cost, so without a bound they fill "
        "every free cycle of a busy machine and finals queue for the CPU behind them (0.25: "
        "10 sessions' final p95 0.74-0.81 s against 0.87-0.99 s with 0.5, on 2 cores). 0.15 "
        "leaves the early speculative decodes their core: 5 sessions' final p95 0.27-0.48 s "
        "with them (20 ms records), against 0.50-0.89 s at 0.25."))
    wide_beam_sessions: int | None = Field(5, ge=1, description=(
        "Finals decode with the recognizer's beam while at most this many sessions are open "
        "on the worker, greedy with more (None: the beam always). On 2 cores, 10 sessions' "
        "final p95 was 0.84 s with a beam of 3 against 0.71 s greedy."))
    early_final_sessions: int | None = Field(5, ge=1, description=(
        "Early speculative decodes (``VadOptions.early_pad_ms``) are asked while at most "
        "this many sessions are open on the worker (None: any number). An early decode is a "
        "bet that the padding stays quiet, thrown away when speech resumes: with 10 sessions "
        "on 2 cores those bets took the cores finals waited for (final p95 0.85 s with them, "
        "0.58 s without; ``python -m bench.realtime --sessions 10 --accounts 2``)."))
    admit_final_lag_s: float | None = Field(None, gt=0, description=(
        "A new session past ``admit_floor`` is refused (``a5sv2_unavailable``) while the p90 "
        "of the finals of the last ``admit_window_s`` came later than this after the audio "
        "they settle (:mod:`~pipeline.realtime.lag`); None: only ``max_sessions`` counts. "
        "The service sets it (``realtime.admit_final_lag_s``)."))
    admit_floor: int = Field(5, ge=1, description=(
        "Sessions a worker takes whatever its finals' lag (``max_sessions`` aside): one "
        "account's limit, and what a 2-core host kept in real time on its slowest day."))
    admit_window_s: float = Field(20.0, gt=0, description=(
        "How far back the finals' lags count, s: long enough for a few finals of each "
        "session, short enough that a worker takes sessions again soon after a rush."))
    thread_name_prefix: str = Field("a5s-realtime", description="Names of the engine's threads.")
    recognizer: RecognizerOptions = RecognizerOptions()
