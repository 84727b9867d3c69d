"""Per-session streaming recognition: VAD endpointing plus Whisper per segment.

A session's audio is cut into segments by Silero VAD (speech start, then
``min_silence_ms`` of silence). While a segment is open it is re-decoded now and then
for *partials*; when it closes it is decoded once more for the *final* text, which is
appended to the settled transcript. Every :class:`Update` carries the whole transcript
so far (settled segments plus the current partial), as the streaming protocol wants.

Whisper invents text on near-silence ("Thank you.", "you") and the end of a stream is
where it meets it most: a breath or a click opens a segment that ``finish`` then closes.
As in the batch recogniser, a doubtful decode (high no-speech probability and low
log-probability) of a segment with almost no speech is dropped, and so is one of the stock
phrases Whisper invents unless it is confidently heard over enough speech
(:func:`invented`).

Final latency is cut by a *speculative* decode: as soon as ``speech_pad_ms`` of silence
follows speech, the segment as it would be closed is decoded; if the silence lasts until
the segment closes, that result is the final and no decode is left to wait for.

:class:`SessionRecognizer` is a state machine with the model work split out, so that
:class:`~pipeline.realtime.engine.RealtimeEngine` can run VAD and decodes on its thread
pools and batch decodes across sessions. Its own :meth:`~SessionRecognizer.accept` and
:meth:`~SessionRecognizer.finish` run everything inline (blocking) for tests and tools.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from schemas.errors import StreamError, StreamErrorCode
from schemas.records import OpenSegment, ResumePoint

from .audio_buffer import AudioBuffer
from .decoder import Decoded, DecodeInput, WhisperDecoder
from .models import StreamingModels
from .options import DecodeOptions, RecognizerOptions
from .vad import VAD_WINDOW, VadStream
from .vocabulary import Vocabulary, VocabularyTerm

__all__ = ["Update", "DecodeKind", "DecodeRequest", "SessionRecognizer", "check_opening",
           "pcm_to_float", "invented"]

_SR = 16000

STOCK_PHRASES = frozenset({
    "you", "thank you", "thanks", "thank you very much", "thank you so much",
    "thanks for watching", "thank you for watching", "thank you for listening",
    "please subscribe", "bye", "bye bye", "goodbye", "the end", "so",
})
"""What Whisper writes for silence, noise and clicks (normalised: lower case, no punctuation)."""


def check_opening(session_id: str, open_ids: Collection[str], closed: bool,
                  max_sessions: int) -> None:
    """What every streaming engine checks before it opens a session.

    Raises:
        StreamError: ``a5sv2_unavailable`` (close 1013) when closing or full.
        ValueError: the id is already open.
    """
    if closed:
        raise StreamError(StreamErrorCode.a5sv2_unavailable, "the recognizer is shutting down")
    if session_id in open_ids:
        raise ValueError(f"session {session_id!r} is already open")
    if len(open_ids) >= max_sessions:
        raise StreamError(StreamErrorCode.a5sv2_unavailable, "no streaming capacity left")


@dataclass(frozen=True, slots=True)
class Update:
    """One ``transcript`` message.

    Attributes:
        text: the complete transcript so far, punctuated and cased (replace, not append).
        is_final: the segment ``segment`` is settled; ``text`` ends with it.
        segment: index of the segment this update is about (0, 1, ...).
        start: that segment's start, s from the start of the stream.
        end: audio covered, s (the segment's end for finals).
    """

    text: str
    is_final: bool
    segment: int
    start: float
    end: float


class DecodeKind(IntEnum):
    """Decode purposes, in scheduling priority (lowest value first)."""

    FINAL = 0
    PREFINAL = 1
    PARTIAL = 2


@dataclass(slots=True, eq=False)
class DecodeRequest:
    """One decode a session needs; ``start``/``end`` are absolute sample indices."""

    kind: DecodeKind
    segment: int
    start: int
    end: int
    decoder: WhisperDecoder
    input: DecodeInput
    created: float = field(default_factory=time.monotonic)


@dataclass(slots=True)
class _Segment:
    index: int
    start: int
    opened_at: int = 0                              # sample where VAD decided speech began
    probs: deque = field(default_factory=deque)     # (window end sample, probability)
    temp_end: int = 0                               # silero: first silent window's end
    silence_seen: float = 0.0                       # monotonic time temp_end was set
    partial_text: str = ""
    partial_end: int = -1                           # audio end of the shown partial
    partial_requested_end: int = -1                 # audio end of the last partial asked
    partial_in_flight: bool = False
    partial_previous_end: int = -1                  # restored when a partial is given back
    prefinal_asked: int = -1                        # end of the last speculative decode asked
    early_asked: int = -1                           # end of the last early speculative decode asked
    speech: int = 0                                 # samples the VAD judged speech


def invented(text: str, decoded: Decoded, speech_s: float, options: DecodeOptions) -> bool:
    """Whether a segment's decode is text Whisper made up rather than heard.

    A decode Whisper's no-speech rule calls silent (``Decoded.silent``) counts as doubtful:
    it is dropped over a click or a breath, kept over a word the VAD clearly heard.

    Args:
        text: the decoded text.
        decoded: the decode's scores.
        speech_s: seconds of the segment the VAD judged speech.
        options: the doubtful thresholds.
    """
    doubtful = decoded.silent or (decoded.no_speech_prob >= options.doubtful_no_speech
                                  and decoded.avg_logprob < options.doubtful_log_prob)
    if doubtful and speech_s < 0.3:     # a click or a breath; one short word is ~0.4 s
        return True
    words = "".join(c for c in text.lower() if c.isalnum() or c.isspace()).split()
    if " ".join(words) not in STOCK_PHRASES:
        return False
    unsure = decoded.no_speech_prob >= 0.3 or decoded.avg_logprob < -0.5
    return unsure or speech_s < 0.6


def pcm_to_float(pcm: bytes) -> np.ndarray:
    """16-bit little-endian PCM bytes to float32 in [-1, 1].

    Raises:
        StreamError: ``invalid_audio_frame`` for an odd byte count.
    """
    if len(pcm) % 2:
        raise StreamError(StreamErrorCode.invalid_audio_frame, "audio frames need an even byte count")
    return np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0


class SessionRecognizer:
    """Decoder state of one live session.

    Not thread-safe: one caller at a time. The engine calls :meth:`detect` on its VAD
    thread and everything else on its event loop.

    Args:
        models: the worker's shared models.
        vocabulary: custom vocabulary terms (strength 0-12).
        options: segmentation and partial cadence.
    """

    def __init__(self, models: StreamingModels, vocabulary: Sequence[VocabularyTerm] = (),
                 options: RecognizerOptions = RecognizerOptions()) -> None:
        self._models = models
        self._opts = options
        self._vocab = Vocabulary(vocabulary)
        hot = self._vocab.prompt_text
        self._prompts = {id(models.partial): models.partial.prompt(hot),
                         id(models.final): models.final.prompt(hot)}
        self._vad: VadStream = models.vad.stream()
        ms = _SR // 1000
        vad = options.vad
        self._pad = vad.speech_pad_ms * ms
        self._early_pad = vad.early_pad_ms * ms
        self._quiet = vad.quiet_probability
        self._start_pad = vad.start_pad_ms * ms
        self._min_silence = vad.min_silence_ms * ms
        self._neg_threshold = max(vad.threshold - vad.neg_threshold_offset, 0.01)
        self._max_segment = options.max_segment_ms * ms
        self._split_search = options.split_search_ms * ms
        self._first_partial = options.first_partial_ms * ms
        self._partial_interval = options.partial_interval_ms * ms
        self._buffer = AudioBuffer(self._max_segment + (options.preroll_ms + 3000) * ms)
        self._pos = 0                       # samples judged by VAD
        self._segment: _Segment | None = None
        self._next_index = 0
        self._last_end = 0                  # end of the last closed segment
        self._settled: list[str] = []
        self._bounds: dict[int, tuple[int, int]] = {}        # segment -> (start, end)
        self._speech: dict[int, int] = {}                     # closed segment -> speech samples
        self._final_texts: dict[int, str] = {}                # decoded, not yet settled
        self._next_settle = 0
        self._pending_finals: deque[DecodeRequest] = deque()
        self._finals_in_flight = 0
        self._awaiting_reuse: dict[int, tuple[int, int]] = {}  # segment -> range of a speculative decode
        self._reusable: dict[tuple[int, int], str] = {}       # final-model results by range
        self._stands_for: dict[tuple[int, int], tuple[int, int]] = {}  # padded range -> early range
        self._last_text = ""
        self._partial_cost = 0.0
        self.finished = False

    # ------------------------------------------------------------------ sync API

    def accept(self, pcm: bytes) -> list[Update]:
        """Take a chunk of 16 kHz s16le PCM; decode inline. Blocking.

        Returns:
            the updates this chunk caused, oldest first.
        """
        samples, probs = self.detect(pcm)
        updates = self.advance(samples, probs)
        updates += self._drain_inline(partials=True)
        return updates

    def finish(self) -> list[Update]:
        """End of stream: settle the open segment. Blocking.

        Returns:
            the remaining updates; the last is always final and carries the whole text
            (when no segment was open, that is a repeat of the last final).
        """
        updates = self.end_of_stream()
        updates += self._drain_inline(partials=False)
        if not updates or not updates[-1].is_final:
            updates.append(self.closing_update())
        return updates

    def _drain_inline(self, partials: bool) -> list[Update]:
        out: list[Update] = []
        while True:
            req = self.take_final() or self.take_prefinal() or (self.take_partial() if partials else None)
            if req is None:
                return out
            decoded = req.decoder.decode([req.input], self.decode_options(req.kind))[0]
            out += self.complete(req, decoded)

    # ------------------------------------------------------------ engine hooks

    def detect(self, pcm: bytes) -> tuple[np.ndarray, np.ndarray]:
        """Convert PCM and run VAD on it (the only model work done per frame).

        Returns:
            the float samples and one speech probability per completed 512-sample window.
        """
        samples = pcm_to_float(pcm)
        return samples, self._vad.accept(samples)

    def advance(self, samples: np.ndarray, probs: np.ndarray) -> list[Update]:
        """Buffer ``samples`` and run endpointing over ``probs`` (cheap; no model work).

        Returns:
            updates settled without a decode (a speculative result reused as final).
        """
        if self.finished:
            raise RuntimeError("audio after finish")
        self._buffer.append(samples)
        updates: list[Update] = []
        thr = self._opts.vad.threshold
        for p in probs:
            self._pos += VAD_WINDOW
            cur = self._pos
            seg = self._segment
            if p >= thr:
                if seg is None:
                    seg = self._open(max(0, cur - self._start_pad - VAD_WINDOW))
                    seg.opened_at = cur
                seg.temp_end = 0
                seg.speech += VAD_WINDOW
            if seg is None:
                continue
            seg.probs.append((cur, float(p)))
            if p < self._neg_threshold:
                if not seg.temp_end:
                    seg.temp_end = cur
                    seg.silence_seen = time.monotonic()
                if cur - seg.temp_end >= self._min_silence:
                    updates += self._close(seg.temp_end - VAD_WINDOW + self._pad)
                    continue
            if cur - seg.start >= self._max_segment:
                updates += self._close(self._quietest(seg), reopen=True)
        self._trim()
        return updates

    def end_of_stream(self) -> list[Update]:
        """Close the open segment at the end of the audio received."""
        updates: list[Update] = []
        if not self.finished and self._segment is not None:
            updates = self._close(self._buffer.end)
        self.finished = True
        return updates

    def closing_update(self) -> Update:
        """The last message of a stream: the whole settled text, final."""
        end = self._buffer.end / _SR
        return Update(self._join(), True, max(self._next_index - 1, 0), end, end)

    def resume_point(self) -> ResumePoint | None:
        """What a recognizer rebuilt from :meth:`restore` needs to go on as this one, or None
        while a closed segment waits for its final (its decode needs audio from before)."""
        seg = self._segment
        if self.finished or self.finals_outstanding or (seg and self._next_settle != seg.index):
            return None
        open_segment = None if seg is None else OpenSegment(
            index=seg.index, start=seg.start, opened_at=seg.opened_at, speech=seg.speech,
            temp_end=seg.temp_end, probs=list(seg.probs))
        start = seg.start if seg else self._pos - self._opts.preroll_ms * (_SR // 1000)
        return ResumePoint(start=max(0, start, self._buffer.start), judged=self._pos,
                           settle=self._next_settle, last_end=self._last_end,
                           settled=list(self._settled), vad=self._vad.snapshot(),
                           open=open_segment)

    def restore(self, point: ResumePoint, primer: np.ndarray) -> None:
        """Go on from ``point`` in a fresh recognizer; ``primer`` is the audio
        ``[point.start, point.judged)``, which the VAD had judged already."""
        if self._pos or self._buffer.end or self._next_index:
            raise RuntimeError("restore needs a fresh recognizer")
        if len(primer) != point.judged - point.start:
            raise ValueError("the primer must cover [start, judged)")
        self._buffer.start = self._buffer.end = point.start
        self._buffer.append(primer)
        self._vad.restore(point.vad)
        self._pos = point.judged
        self._next_index = self._next_settle = point.settle
        self._last_end = point.last_end
        self._settled = list(point.settled)
        self._last_text = self._join()
        if point.open is not None:
            o = point.open
            seg = self._open(o.start)
            seg.opened_at, seg.speech, seg.temp_end = o.opened_at, o.speech, o.temp_end
            seg.silence_seen = time.monotonic() if o.temp_end else 0.0
            seg.probs.extend(o.probs)

    @property
    def heard_s(self) -> float:
        """Seconds of the stream judged so far, on the updates' clock (a restored session
        goes on from its point)."""
        return self._pos / _SR

    @property
    def finals_outstanding(self) -> bool:
        """Whether some closed segment is not settled yet."""
        return self._next_settle < self._next_index - (self._segment is not None)

    def decode_options(self, kind: DecodeKind) -> DecodeOptions:
        """Decode options for requests of ``kind``."""
        return self._opts.partial_decode if kind is DecodeKind.PARTIAL else self._opts.decode

    def take(self, kind: DecodeKind, *, early: bool = True) -> DecodeRequest | None:
        """The next request of ``kind`` if one is wanted now (see the ``take_*`` methods)."""
        if kind is DecodeKind.FINAL:
            return self.take_final()
        if kind is DecodeKind.PREFINAL:
            return self.take_prefinal(early=early)
        return self.take_partial()

    def give_back(self, req: DecodeRequest) -> None:
        """Undo a ``take`` whose request could not be scheduled now."""
        if req.kind is DecodeKind.FINAL:
            self._finals_in_flight -= 1
            self._pending_finals.appendleft(req)
            return
        seg = self._segment
        if seg is None or seg.index != req.segment:
            return
        if req.kind is DecodeKind.PREFINAL:
            if req.end == seg.early_asked:
                seg.early_asked = -1
            else:
                seg.prefinal_asked = -1
        else:
            seg.partial_in_flight = False
            seg.partial_requested_end = seg.partial_previous_end

    def waiting_since(self, kind: DecodeKind) -> float:
        """Monotonic time the oldest wanted request of ``kind`` became due (inf: none)."""
        if kind is DecodeKind.FINAL:
            return self._pending_finals[0].created if self._pending_finals else float("inf")
        seg = self._segment
        if kind is DecodeKind.PREFINAL and seg is not None and seg.temp_end:
            return seg.silence_seen
        return float("inf")

    def take_final(self) -> DecodeRequest | None:
        """The oldest final decode still to run, if any."""
        if not self._pending_finals:
            return None
        self._finals_in_flight += 1
        return self._pending_finals.popleft()

    def take_prefinal(self, early: bool = True) -> DecodeRequest | None:
        """The speculative final decode of the open segment, when its silence has begun.

        With ``early_pad_ms`` (and ``early``: the engine turns it off above
        ``EngineOptions.early_final_sessions``), first an early one that does not wait for
        the whole padding; the padded one is then asked only if the rest of the padding is
        not quiet.
        """
        seg = self._segment
        if seg is None or not seg.temp_end:
            return None
        end = seg.temp_end - VAD_WINDOW + self._pad
        early_end = seg.temp_end - VAD_WINDOW + self._early_pad
        if early and self._early_pad and early_end < end and early_end <= self._buffer.end < end:
            if seg.early_asked == early_end or (seg.start, early_end) in self._reusable:
                return None
            seg.early_asked = early_end
            # Decoded as if the rest of the padding were silence, which is when it is used.
            return self._request(DecodeKind.PREFINAL, seg, early_end, self._models.final,
                                 end - early_end)
        if end > self._buffer.end or seg.prefinal_asked == end:
            return None
        seg.prefinal_asked = end
        if (seg.start, end) in self._reusable:
            return None
        if seg.early_asked == early_end and all(p < self._quiet for at, p in seg.probs
                                                if at > early_end):
            # The padding after the early decode holds nothing the VAD half-hears.
            self._stands_for[(seg.start, end)] = (seg.start, early_end)
            return None
        return self._request(DecodeKind.PREFINAL, seg, end, self._models.final)

    def partial_due(self, stretch: float = 1.0) -> bool:
        """Whether the open segment has grown enough for a new partial.

        Args:
            stretch: factor on the partial interval (the engine raises it under load).
        """
        seg = self._segment
        if seg is None or seg.partial_in_flight or seg.temp_end:
            return False
        end = self._buffer.end
        if end - seg.opened_at < self._first_partial:
            return False
        if seg.partial_requested_end < 0:
            return True
        if not seg.partial_text:
            # Nothing shown yet (too little audio for words): retry soon.
            interval = self._first_partial // 2
        else:
            interval = max(self._partial_interval * stretch, 1.5 * self._partial_cost * _SR)
        return end - seg.partial_requested_end >= interval

    def partial_rank(self) -> tuple[bool, int]:
        """Sort key among sessions wanting a partial: no text shown yet, then longest wait."""
        seg = self._segment
        if seg is None:
            return (True, 0)
        return (bool(seg.partial_text), max(seg.partial_requested_end, seg.start) - self._buffer.end)

    def take_partial(self, stretch: float = 1.0) -> DecodeRequest | None:
        """A partial decode of the open segment up to the newest audio, if one is due."""
        if not self.partial_due(stretch):
            return None
        seg = self._segment
        seg.partial_in_flight = True
        seg.partial_previous_end = seg.partial_requested_end
        seg.partial_requested_end = self._buffer.end
        return self._request(DecodeKind.PARTIAL, seg, self._buffer.end, self._models.partial)

    def complete(self, req: DecodeRequest, decoded: Decoded, elapsed: float = 0.0) -> list[Update]:
        """Apply a decode result.

        Args:
            req: the request it answers.
            decoded: its result.
            elapsed: wall time of the decode, s (paces this session's partials).

        Returns:
            the updates it causes (possibly none: stale partials are dropped).
        """
        text = self._vocab.correct(decoded.text)
        seg = self._segment
        speech = seg.speech if seg is not None and seg.index == req.segment else \
            self._speech.get(req.segment, 0)
        if text and invented(text, decoded, speech / _SR, self.decode_options(req.kind)):
            text = ""
        # A partial never stands for a final, even from the same model: its smaller window
        # and single continuation gave "5" for "five five" at the end of a stream.
        if req.decoder is self._models.final and req.kind is not DecodeKind.PARTIAL:
            self._reusable[(req.start, req.end)] = text
        if req.kind is DecodeKind.FINAL:
            self._finals_in_flight -= 1
            self._final_texts[req.segment] = text
            return self._settle()
        if req.kind is DecodeKind.PARTIAL:
            # Smoothed decode time: a session whose partials are slow asks for them less often.
            self._partial_cost = 0.7 * self._partial_cost + 0.3 * elapsed if self._partial_cost else elapsed
            if seg is not None and seg.index == req.segment:
                seg.partial_in_flight = False
        waiting = self._awaiting_reuse.get(req.segment)
        if waiting == (req.start, req.end) and req.kind is not DecodeKind.PARTIAL:
            del self._awaiting_reuse[req.segment]
            self._final_texts[req.segment] = text
            return self._settle()
        if seg is None or seg.index != req.segment or req.end <= seg.partial_end:
            return []
        seg.partial_text, seg.partial_end = text, req.end
        return self._emit(False, seg.index, seg.start, req.end)

    # --------------------------------------------------------------- internals

    def _open(self, start: int) -> _Segment:
        # The start padding never reaches back into the previous segment.
        self._segment = _Segment(self._next_index, max(start, self._buffer.start, self._last_end))
        self._next_index += 1
        self._reusable.clear()
        self._stands_for.clear()
        return self._segment

    def _close(self, end: int, reopen: bool = False) -> list[Update]:
        seg = self._segment
        end = min(max(end, seg.start + VAD_WINDOW), self._buffer.end)
        self._bounds[seg.index] = (seg.start, end)
        self._speech[seg.index] = seg.speech
        self._last_end = end
        self._segment = None
        updates: list[Update] = []
        key = self._stands_for.get((seg.start, end), (seg.start, end))
        if key in self._reusable:
            self._final_texts[seg.index] = self._reusable[key]
            updates = self._settle()
        elif seg.prefinal_asked == end:
            self._awaiting_reuse[seg.index] = key                 # in flight: its result settles
        else:
            self._pending_finals.append(self._request(DecodeKind.FINAL, seg, end, self._models.final))
        if reopen:
            nxt = self._open(end)
            nxt.opened_at = end
            nxt.probs.extend(x for x in seg.probs if x[0] > end)
            thr = self._opts.vad.threshold
            nxt.speech = sum(VAD_WINDOW for at, p in nxt.probs if p >= thr)
        return updates

    def _quietest(self, seg: _Segment) -> int:
        """Split point of an over-long segment: the least speech-like recent window."""
        cut_from = self._pos - self._split_search
        recent = [(p, at) for at, p in seg.probs if at >= cut_from and at > seg.start + self._first_partial]
        if not recent:
            return self._pos
        p, at = min(recent)
        return at - VAD_WINDOW // 2

    def _request(self, kind: DecodeKind, seg: _Segment, end: int, decoder: WhisperDecoder,
                 silence: int = 0) -> DecodeRequest:
        audio = self._buffer.slice(seg.start, end)
        if silence:
            audio = np.concatenate([audio, np.zeros(silence, dtype=audio.dtype)])
        return DecodeRequest(kind, seg.index, seg.start, end, decoder,
                             DecodeInput(audio, self._prompts[id(decoder)]))

    def _settle(self) -> list[Update]:
        updates: list[Update] = []
        while self._next_settle in self._final_texts:
            i = self._next_settle
            text = self._final_texts.pop(i)
            if text:
                self._settled.append(text)
            start, end = self._bounds.pop(i)
            self._speech.pop(i, None)
            self._next_settle += 1
            # A final is sent when it adds text or clears a shown partial.
            updates += self._emit(True, i, start, end, force=bool(text))
        seg = self._segment
        if updates and seg is not None and seg.partial_text:
            updates += self._emit(False, seg.index, seg.start, seg.partial_end)
        return updates

    def _emit(self, final: bool, index: int, start: int, end: int, force: bool = False) -> list[Update]:
        text = self._join(partial=not final)
        if text == self._last_text and not force:
            return []
        self._last_text = text
        return [Update(text, final, index, start / _SR, end / _SR)]

    def _join(self, partial: bool = False) -> str:
        parts = list(self._settled)
        seg = self._segment
        if partial and seg is not None and seg.partial_text:
            parts.append(seg.partial_text)
        # Whisper sees each segment alone and sometimes starts one in lower case;
        # a transcript or sentence start is capitalised.
        out = ""
        for part in parts:
            if not out or out[-1] in ".!?":
                part = part[:1].upper() + part[1:]
            out = f"{out} {part}" if out else part
        return out

    def _trim(self) -> None:
        seg = self._segment
        keep = seg.start if seg is not None else self._buffer.end - self._opts.preroll_ms * (_SR // 1000)
        self._buffer.drop_before(keep)
        if seg is not None:
            while seg.probs and seg.probs[0][0] < self._pos - self._split_search - VAD_WINDOW:
                seg.probs.popleft()
