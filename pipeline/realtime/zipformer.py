"""``a5s-v2-streaming`` on a streaming Zipformer: sherpa-onnx's online recognizer, chunk by chunk.

The Whisper engine cuts speech into VAD segments and re-decodes them; a streaming
transducer instead carries its state from chunk to chunk, so every chunk of audio
moves the hypothesis forward and is shown at once as a partial. sherpa-onnx's endpoint
rules close a segment (rule 1: trailing silence with nothing decoded, rule 2: trailing
silence after speech, rule 3: a segment too long), and its text becomes final.

Text: icefall's English models are trained on uppercase text without punctuation. The
words are lowercased, then cased by the ``truecase`` statistical model (when the setting
is on and the model's tokens are uppercase), the custom vocabulary's spellings are
restored, and each settled segment becomes a sentence: capital first letter, full stop.
What this cannot give is punctuation inside a sentence (commas, questions).

Custom vocabulary: each term is a sherpa-onnx hotword (modified beam search with a
context graph) scored ``strength / 4`` per token, so the default strength 6 is
sherpa-onnx's default 1.5, and 12 is 3.0; strength 0 boosts nothing and only restores
the term's spelling. Terms are split into the model's BPE pieces with ``bpe.vocab``
from the model directory, or one a5s writes from ``tokens.txt``; a term the pieces
cannot spell is left to the spelling fix alone.

Same interface as :class:`~pipeline.realtime.engine.RealtimeEngine` (``open`` /
``accept`` / ``finish`` / ``wait_updates`` / ``close`` / ``aclose``).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from schemas.errors import StreamError, StreamErrorCode

from ..models import resolve_transducer
from .recognizer import Update, check_opening, pcm_to_float
from .vocabulary import Vocabulary, VocabularyTerm

__all__ = ["ZipformerOptions", "ZipformerModel", "ZipformerRealtimeEngine", "load_engine"]

log = logging.getLogger("a5s.realtime")

_SR = 16000


class ZipformerOptions(BaseModel):
    """The streaming Zipformer's search, endpoint rules and limits (seconds where timed)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    num_threads: int = Field(1, ge=1, description="ONNX Runtime threads per decode.")
    max_sessions: int = Field(10, ge=1, description="Sessions open at once; more are refused.")
    max_active_paths: int = Field(4, ge=1, description="Beam of modified beam search.")
    rule1_min_trailing_silence: float = Field(2.4, gt=0, description=(
        "Silence that ends a segment in which nothing was decoded, s."))
    rule2_min_trailing_silence: float = Field(0.8, gt=0, description=(
        "Silence after speech that settles a segment, s (sherpa-onnx: 1.2)."))
    rule3_min_utterance_length: float = Field(20.0, gt=0, description=(
        "A segment this long is settled whatever follows, s."))
    tail_padding_s: float = Field(0.5, ge=0, description=(
        "Silence fed after the last audio, so the encoder's look-ahead sees the end."))
    truecase: bool = Field(True, description="Restore casing of uppercase models.")
    provider: str = Field("cpu", description="ONNX Runtime execution provider.")


class ZipformerModel:
    """The online recognizer and text tools, loaded once and shared by every session.

    Args:
        model_dir: icefall ``export-onnx-streaming.py`` output with ``tokens.txt``.
        cache_dir: where a ``bpe.vocab`` made from ``tokens.txt`` is written if needed.
        options: search, endpoint rules and casing.
    """

    def __init__(self, model_dir: str | Path, cache_dir: Path,
                 options: ZipformerOptions = ZipformerOptions()) -> None:
        import sherpa_onnx
        self.options = options
        files = resolve_transducer(model_dir)
        self.pieces = _read_pieces(files.tokens)
        self.uppercase = _is_uppercase(self.pieces)
        bpe_vocab = _bpe_vocab(Path(model_dir), files.tokens, cache_dir)
        self.recognizer = sherpa_onnx.OnlineRecognizer.from_transducer(
            tokens=str(files.tokens), encoder=str(files.encoder), decoder=str(files.decoder),
            joiner=str(files.joiner), num_threads=options.num_threads, sample_rate=_SR,
            feature_dim=80, enable_endpoint_detection=True,
            rule1_min_trailing_silence=options.rule1_min_trailing_silence,
            rule2_min_trailing_silence=options.rule2_min_trailing_silence,
            rule3_min_utterance_length=options.rule3_min_utterance_length,
            decoding_method="modified_beam_search", max_active_paths=options.max_active_paths,
            modeling_unit="bpe", bpe_vocab=str(bpe_vocab), provider=options.provider)
        self._truecaser: Any = None
        if options.truecase and self.uppercase:
            import truecase
            self._truecaser = truecase.get_truecaser()
        self.name = f"zipformer:{Path(model_dir).name}"

    def hotwords(self, vocabulary: Vocabulary) -> str:
        """sherpa-onnx hotword lines for the boosted terms the model's pieces can spell."""
        lines = []
        for term in vocabulary.terms:
            phrase = " ".join(term.text.split())
            phrase = phrase.upper() if self.uppercase else phrase
            if term.strength > 0 and _spellable(phrase, self.pieces):
                lines.append(f"{phrase} :{term.strength / 4:g}")
        return "\n".join(lines)

    def words(self, stream: Any) -> list[str]:
        """The stream's current hypothesis as words (special symbols dropped)."""
        words: list[str] = []
        for piece in self.recognizer.get_result_all(stream).tokens:
            if piece.startswith("<") and piece.endswith(">"):
                continue
            if piece[:1] in (" ", "\u2581") or not words:
                words.append(piece.lstrip(" \u2581"))
            else:
                words[-1] += piece
        return [w for w in words if w]

    def format(self, words: list[str], vocabulary: Vocabulary, sentence: bool) -> str:
        """Recognizer words to display text; ``sentence``: a settled segment (full stop)."""
        if not words:
            return ""
        if self.uppercase:
            words = [w.lower() for w in words]
            if self._truecaser is not None:
                words = self._truecaser.get_true_case_from_tokens(
                    words, out_of_vocabulary_token_option="as-is")
        text = vocabulary.correct(" ".join(words))
        text = text[0].upper() + text[1:]
        if sentence and text[-1] not in ".?!":
            text += "."
        return text


@dataclass(eq=False)
class _Session:
    id: str
    stream: Any
    vocabulary: Vocabulary
    settled: list[str] = field(default_factory=list)
    segment: int = 0
    segment_start: int = 0
    samples: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    finished: bool = False


@dataclass(eq=False)
class _Work:
    """Audio one ``accept`` (or ``finish``: ``last``) hands the scheduler, and its answer."""

    session: _Session
    samples: np.ndarray
    last: bool
    done: asyncio.Future[list[Update]]


class ZipformerRealtimeEngine:
    """Runs live sessions on one :class:`ZipformerModel`; call from one event loop.

    One scheduler takes the audio every session has handed in since its last turn, feeds
    it to the sessions' streams and decodes the ready chunks of all of them together
    (``decode_streams``, one batched encoder call per round), on the engine's named
    decode thread: the sherpa-onnx ``streaming_server`` pattern. Each ``accept`` returns
    the updates of its audio: a partial per decoded round, a final when an endpoint rule
    fired.
    """

    def __init__(self, model: ZipformerModel, options: ZipformerOptions | None = None) -> None:
        self._model = model
        self._opts = options or model.options
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="a5s-realtime-zipformer")
        self._sessions: dict[str, _Session] = {}
        self._queue: list[_Work] = []
        self._wake = asyncio.Event()
        self._scheduler: asyncio.Task[None] | None = None
        self._closed = False
        self.rounds: list[int] = []
        """Streams decoded per ``decode_streams`` call, most recent last (at most 1000)."""

    @property
    def session_count(self) -> int:
        return len(self._sessions)

    def open(self, session_id: str, vocabulary: Sequence[VocabularyTerm] = (), *,
             new: bool = False) -> None:
        """Start a session (``a5sv2_unavailable`` when full or shutting down); only the cap
        admits here (``new`` is the Whisper engine's: see :meth:`final_lag`)."""
        check_opening(session_id, self._sessions, self._closed, self._opts.max_sessions)
        vocab = Vocabulary(vocabulary)
        hot = self._model.hotwords(vocab)
        rec = self._model.recognizer
        stream = rec.create_stream(hot) if hot else rec.create_stream()
        self._sessions[session_id] = _Session(session_id, stream, vocab)

    def final_lag(self, now: float | None = None) -> None:
        """Not measured: no admission by lag was built or measured for this engine, whose
        every chunk is decoded as it comes (no export ships to measure one with)."""
        return None

    def resume_point(self, session_id: str) -> None:
        """A transducer stream's state is not rebuilt from a point: a session taken over
        replays its audio from its start."""
        return None

    def close(self, session_id: str) -> None:
        """Forget a session. Idempotent."""
        self._sessions.pop(session_id, None)

    async def accept(self, session_id: str, pcm: bytes,
                     sent: float | None = None) -> list[Update]:
        """Feed 16 kHz s16le audio; returns the updates of the chunks it completed
        (``sent``, the Whisper engine's, is not used: see :meth:`final_lag`).

        Raises:
            StreamError: ``invalid_audio_frame`` for odd-length PCM; ``internal_error``
                when the recognizer fails.
        """
        s = self._session(session_id)
        samples = pcm_to_float(pcm)
        async with s.lock:
            return await self._submit(s, samples, False)

    async def finish(self, session_id: str) -> list[Update]:
        """End of audio: decode the rest; the last update is final with the whole text."""
        s = self._session(session_id)
        async with s.lock:
            updates = await self._submit(s, np.zeros(0, dtype=np.float32), True)
        if not updates or not updates[-1].is_final:
            end = s.samples / _SR
            updates.append(Update(" ".join(s.settled), True, max(s.segment - 1, 0), end, end))
        return updates

    async def wait_updates(self, session_id: str, timeout: float | None = None) -> list[Update]:
        """Updates arrive with ``accept``; this only waits (up to ``timeout``) for a change."""
        s = self._session(session_id)
        s.changed.clear()
        try:
            await asyncio.wait_for(s.changed.wait(), timeout)
        except TimeoutError:
            pass
        return []

    async def aclose(self) -> None:
        self._closed = True
        if self._scheduler is not None:
            self._scheduler.cancel()
            await asyncio.gather(self._scheduler, return_exceptions=True)
        for work in self._queue:  # nobody will decode these: their callers hear so
            if not work.done.done():
                work.done.set_exception(RuntimeError("the recognizer is shutting down"))
        self._queue.clear()
        await asyncio.get_running_loop().run_in_executor(None, self._pool.shutdown)

    # --- scheduling (event loop) --------------------------------------------------------------

    def _session(self, session_id: str) -> _Session:
        try:
            return self._sessions[session_id]
        except KeyError:
            raise KeyError(f"unknown session {session_id!r}") from None

    async def _submit(self, s: _Session, samples: np.ndarray, last: bool) -> list[Update]:
        if s.finished:
            raise RuntimeError("audio after finish")
        if self._scheduler is None or self._scheduler.done():
            self._scheduler = asyncio.create_task(self._schedule(),
                                                  name="a5s-realtime-zipformer-scheduler")
        work = _Work(s, samples, last, asyncio.get_running_loop().create_future())
        self._queue.append(work)
        self._wake.set()
        try:
            return await work.done
        except (RuntimeError, ValueError) as exc:
            raise StreamError(StreamErrorCode.internal_error, "recognition failed") from exc

    async def _schedule(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._queue:
                self._wake.clear()
                await self._wake.wait()
                continue
            batch, self._queue = self._queue, []
            try:
                results = await loop.run_in_executor(self._pool, self._round, batch)
            except Exception as exc:  # every caller in the round hears of it
                for work in batch:
                    if not work.done.done():
                        work.done.set_exception(exc)
                continue
            for work, updates in zip(batch, results, strict=True):
                if not work.done.done():
                    work.done.set_result(updates)

    # --- decoding (the decode thread) ---------------------------------------------------------

    def _round(self, batch: list[_Work]) -> list[list[Update]]:
        """Feed every session's audio, then decode all ready streams together until none is."""
        rec = self._model.recognizer
        updates: dict[int, list[Update]] = {id(w): [] for w in batch}
        decoded: dict[int, bool] = {}
        for work in batch:
            s, stream = work.session, work.session.stream
            if work.samples.size:
                stream.accept_waveform(_SR, work.samples)
                s.samples += work.samples.size
            if work.last:
                pad = int(self._opts.tail_padding_s * _SR)
                if pad:
                    stream.accept_waveform(_SR, np.zeros(pad, dtype=np.float32))
                stream.input_finished()
        owner = {id(w.session): w for w in batch}
        while ready := [w for w in owner.values() if rec.is_ready(w.session.stream)]:
            rec.decode_streams([w.session.stream for w in ready])
            self.rounds = [*self.rounds[-999:], len(ready)]
            for work in ready:
                decoded[id(work)] = True
                if rec.is_endpoint(work.session.stream):
                    updates[id(work)] += self._settle(work.session, reset=True)
                    decoded[id(work)] = False
        for work in batch:
            s = work.session
            if owner[id(s)] is not work:
                continue  # its session's later audio in this round reports for both
            if work.last:
                updates[id(work)] += self._settle(s, reset=False)
            elif decoded.get(id(work)) and (words := self._model.words(s.stream)):
                text = self._model.format(words, s.vocabulary, sentence=False)
                updates[id(work)].append(Update(" ".join([*s.settled, text]), False, s.segment,
                                                s.segment_start / _SR, s.samples / _SR))
        return [updates[id(w)] for w in batch]

    def _settle(self, s: _Session, reset: bool) -> list[Update]:
        """Close the current segment at an endpoint (``reset``: the stream goes on) or at
        the end of the audio."""
        rec = self._model.recognizer
        text = self._model.format(self._model.words(s.stream), s.vocabulary, sentence=True)
        if reset:
            rec.reset(s.stream)
        else:
            s.finished = True
        if not text:
            s.segment_start = s.samples
            return []
        s.settled.append(text)
        update = Update(" ".join(s.settled), True, s.segment, s.segment_start / _SR,
                        s.samples / _SR)
        s.segment += 1
        s.segment_start = s.samples
        return [update]


async def load_engine(model_dir: str, cache_dir: Path, truecase: bool,
                      max_sessions: int) -> ZipformerRealtimeEngine:
    """Load the model off the event loop and build the engine (the realtime agent's hook)."""
    options = ZipformerOptions(truecase=truecase, max_sessions=max_sessions)
    loop = asyncio.get_running_loop()
    model = await loop.run_in_executor(None, ZipformerModel, model_dir, cache_dir, options)
    return ZipformerRealtimeEngine(model, options)


# --- tokens and BPE pieces ----------------------------------------------------------------------

def _read_pieces(tokens: Path) -> list[str]:
    out = []
    for line in tokens.read_text(encoding="utf-8").splitlines():
        parts = line.rsplit(maxsplit=1)
        if parts:
            out.append(parts[0])
    return out


def _is_uppercase(pieces: Sequence[str]) -> bool:
    letters = "".join(p for p in pieces if not p.startswith("<"))
    return any(c.isalpha() for c in letters) and not any(c.islower() for c in letters)


def _bpe_vocab(model_dir: Path, tokens: Path, cache_dir: Path) -> Path:
    """``bpe.vocab`` of the model, or one written from ``tokens.txt`` (earlier = preferred
    merge, as sentencepiece numbers its pieces)."""
    own = model_dir / "bpe.vocab"
    if own.is_file():
        return own
    raw = tokens.read_bytes()
    path = cache_dir / f"bpe-{hashlib.sha256(raw).hexdigest()[:16]}.vocab"
    if not path.is_file():
        cache_dir.mkdir(parents=True, exist_ok=True)
        lines = [f"{p}\t{-i}\n" for i, p in enumerate(_read_pieces(tokens))]
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(lines), encoding="utf-8")
        tmp.replace(path)
    return path


def _spellable(phrase: str, pieces: Sequence[str]) -> bool:
    """Whether every word of ``phrase`` splits into the model's pieces (first with ``▁``)."""
    vocab = set(pieces)
    for word in phrase.split():
        text = "\u2581" + word
        ok = [True] + [False] * len(text)
        for end in range(1, len(text) + 1):
            ok[end] = any(ok[start] and text[start:end] in vocab for start in range(end))
        if not ok[-1]:
            return False
    return True
