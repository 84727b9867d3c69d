"""Whisper through CTranslate2 (faster-whisper): the batch recogniser.

Whisper invents text when it hears none: "You" on silence, "Thank you for
watching" on a tone, loops of one phrase. The engine decodes each chunk on its
own (no text carried over from the previous chunk, so one bad chunk cannot seed
the next), keeps Whisper's own fallbacks (temperature retries on high
compression ratio or low log-probability, no-speech skipping), and then applies
its own checks:

* a chunk whose peak is below ``silence_peak_dbfs`` is not decoded at all;
* a "doubtful" segment (no-speech probability of at least ``doubtful_no_speech``)
  is dropped when its log-probability or mean word probability is low, and
  loses its very unlikely words otherwise;
* a phrase repeated more than ``max_repeats`` times in a row is kept once;
* prompted with a job's key terms, Whisper may write them again after the speech ends (an
  echo of its prompt: "... a standard telephone. Asterisk, PBX." at 0.17 and 0.004), or
  write one in place of a word it hears ("IVR, Queen of Clothes." at 0.0004 for "four
  queen of clubs"): words at the end of a chunk that are prompt words below
  ``prompt_echo_probability``, and prompt words anywhere below ``prompt_word_floor``, are
  dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ..text import collapse_repeats, normalise_text, normalise_words
from ..types import SAMPLE_RATE, TimedWord
from .base import map_engine_errors, resolve_device
from .word_edges import snap_to_sound

__all__ = ["WhisperOptions", "WhisperEngine"]


class WhisperOptions(BaseModel):
    """How the Whisper model is loaded and how each chunk is decoded."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    device: str = "cpu"
    """``cpu``, ``cuda`` or ``auto``."""
    device_index: int = Field(0, ge=0)
    """Which GPU, when ``device`` is ``cuda``."""
    compute_type: str | None = None
    """CTranslate2 compute type; ``None``: ``int8`` on CPU, ``float16`` on CUDA."""
    cpu_threads: int = Field(2, ge=0)
    """Threads per decode on CPU (0: CTranslate2's default)."""
    workers: int = Field(1, ge=1)
    """Decodes that may run at once, from as many Python threads (CTranslate2 replicas)."""
    beam_size: int = Field(5, ge=1)
    """Beam width; 1 is greedy (faster, a little less accurate)."""
    language: str = "en"
    """Language code forced on the decoder (English-only models ignore it)."""
    temperatures: tuple[float, ...] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    """Decoding temperatures tried in turn while a result fails the thresholds below."""
    compression_ratio_threshold: float = 2.4
    """Text more compressible (gzip ratio) than this is a repetition loop: retry hotter."""
    log_prob_threshold: float = -1.0
    """Mean token log-probability below this: retry hotter."""
    no_speech_threshold: float = 0.6
    """With a low log-probability, a no-speech probability above this skips the window."""
    hallucination_silence_threshold_s: float | None = Field(None, gt=0)
    """Skip silences longer than this (seconds) around suspected hallucinations; ``None``: off."""
    doubtful_no_speech: float = Field(0.5, ge=0, le=1)
    """Segments with at least this no-speech probability get the checks below."""
    doubtful_log_prob: float = -0.7
    """A doubtful segment with a lower mean token log-probability is dropped."""
    doubtful_word_probability: float = Field(0.5, ge=0, le=1)
    """A doubtful segment with a lower mean word probability is dropped."""
    min_word_probability: float = Field(0.1, ge=0, le=1)
    """Words of a doubtful segment below this probability are dropped."""
    max_repeats: int = Field(4, ge=1)
    """A word or phrase repeated more often than this in a row is kept once."""
    silence_peak_dbfs: float = -70.0
    """Chunks whose loudest sample is below this level (dBFS) are silence: not decoded."""
    window_pad_frames: int | None = Field(500, ge=0, le=3000)
    """Encoder window = the chunk plus this many zero frames (10 ms each); ``None``: 30 s."""
    min_window_frames: int = Field(1000, ge=100, le=3000)
    """The smallest fitted encoder window, 10 ms frames."""
    timestamp_tokens: bool = True
    """Decode with timestamp tokens; off, the fitted-window path prompts
    ``<|notimestamps|>`` (far cheaper beam search on a GPU) and takes the word times from
    the alignment alone (:mod:`pipeline.asr.whisper_batch`)."""
    prompt_echo_probability: float = Field(0.5, ge=0, le=1)
    """With key terms in the prompt, trailing words of a chunk that are prompt words and less
    likely than this are an echo of the prompt: dropped."""
    prompt_word_floor: float = Field(0.01, ge=0, le=1)
    """With key terms in the prompt, a prompt word anywhere less likely than this is one
    written for its being in the prompt, not heard: dropped (a term heard was written at
    0.23 to 0.99 on the eval set, one not spoken at 0.0004)."""
    snap_word_edges: bool = True
    """Move word edges that the alignment left inside a pause to the sound
    (:mod:`pipeline.asr.word_edges`): the same times whatever the window, batch or CPU."""


class WhisperEngine:
    """Whisper model, loaded once; :meth:`transcribe` may run on ``opts.workers`` threads."""

    takes_hotwords = True
    """:meth:`transcribe` and :meth:`transcribe_batch` take a job's key terms (``hotwords``):
    faster-whisper's previous-text prompt, which biases the decoder toward their spelling."""

    def __init__(self, model_dir: str | Path, opts: WhisperOptions | None = None, *,
                 name: str | None = None) -> None:
        """Load the CTranslate2 model in ``model_dir`` (see ``pipeline.models.resolve_whisper``).

        Args:
            model_dir: the model directory.
            opts: loading and decoding options.
            name: label for logs and metrics; defaults to ``whisper:<directory name>``.
        """
        from faster_whisper import WhisperModel  # slow import; only workers that decode need it

        self.opts = opts = opts or WhisperOptions()
        model_dir = Path(model_dir)
        self.device = device = resolve_device(opts.device)
        compute_type = opts.compute_type or ("int8" if device == "cpu" else "float16")
        self.name = name or f"whisper:{model_dir.name}"
        self.batch_fallbacks = 0
        """Chunks of batched calls that had to be decoded alone (temperature fallback)."""
        with map_engine_errors("ctranslate2"):
            self._model = WhisperModel(str(model_dir), device=device,
                                       device_index=opts.device_index, compute_type=compute_type,
                                       cpu_threads=opts.cpu_threads, num_workers=opts.workers,
                                       local_files_only=True)
        self._silence_peak = 10 ** (opts.silence_peak_dbfs / 20)

    def transcribe(self, audio: np.ndarray, offset: float,
                   hotwords: str | None = None) -> list[TimedWord]:
        """Recognise one chunk (at most 30 s); see :class:`~pipeline.asr.base.AsrEngine`.

        ``hotwords``: key terms written into the decoder's prompt (None: no prompt)."""
        audio = np.ascontiguousarray(audio, dtype=np.float32)
        if audio.size == 0 or float(np.max(np.abs(audio))) < self._silence_peak:
            return []
        o = self.opts
        if o.window_pad_frames is not None and o.hallucination_silence_threshold_s is None:
            segments = self._decode_fitted([audio], hotwords)[0]
            if segments is not None:
                return self._words(segments, audio, offset, hotwords)
            self.batch_fallbacks += 1
        return self._transcribe_full(audio, offset, hotwords)

    def _transcribe_full(self, audio: np.ndarray, offset: float,
                         hotwords: str | None = None) -> list[TimedWord]:
        """faster-whisper's own loop: 30 s windows and the whole temperature ladder."""
        o = self.opts
        with map_engine_errors("ctranslate2"):
            segments, _ = self._model.transcribe(
                audio, language=o.language, beam_size=o.beam_size, temperature=list(o.temperatures),
                compression_ratio_threshold=o.compression_ratio_threshold,
                log_prob_threshold=o.log_prob_threshold, no_speech_threshold=o.no_speech_threshold,
                condition_on_previous_text=False, word_timestamps=True, vad_filter=False,
                hallucination_silence_threshold=o.hallucination_silence_threshold_s,
                hotwords=hotwords)
            segments = list(segments)  # the generator decodes lazily: drain it here
        return self._words(segments, audio, offset, hotwords)

    def transcribe_batch(self, items: Sequence[tuple[np.ndarray, float]],
                         hotwords: str | None = None) -> list[list[TimedWord]]:
        """Recognise several chunks (at most 30 s each) in one batched decode.

        The results are those of :meth:`transcribe` on each chunk: the same
        silence check and hallucination guards; a chunk that needs Whisper's
        temperature fallback (or a second window) is decoded alone
        (see :mod:`pipeline.asr.whisper_batch`).

        Args:
            items: ``(audio, offset)`` pairs as for :meth:`transcribe`.
            hotwords: key terms for every chunk's prompt, as for :meth:`transcribe`.

        Returns:
            The words of each chunk, in the order of ``items``.
        """
        o = self.opts
        out: list[list[TimedWord]] = [[] for _ in items]
        live: list[tuple[int, np.ndarray, float]] = []
        for i, (audio, offset) in enumerate(items):
            audio = np.ascontiguousarray(audio, dtype=np.float32)
            if audio.size and float(np.max(np.abs(audio))) >= self._silence_peak:
                live.append((i, audio, offset))
        if len(live) < 2 or o.hallucination_silence_threshold_s is not None:
            for i, audio, offset in live:  # nothing to batch, or a guard only the loop has
                out[i] = self.transcribe(audio, offset, hotwords)
            return out
        decoded = self._decode_fitted([a for _, a, _ in live], hotwords)
        for (i, audio, offset), segments in zip(live, decoded, strict=True):
            if segments is None:
                self.batch_fallbacks += 1
                out[i] = self._transcribe_full(audio, offset, hotwords)
            else:
                out[i] = self._words(segments, audio, offset, hotwords)
        return out

    def _decode_fitted(self, audios: list[np.ndarray],
                       hotwords: str | None = None) -> list[list | None]:
        """One temperature-0 pass over ``audios`` (see :mod:`pipeline.asr.whisper_batch`)."""
        from .whisper_batch import BatchDecodeOptions, decode_batch

        o = self.opts
        with map_engine_errors("ctranslate2"):
            return decode_batch(self._model, audios, BatchDecodeOptions(
                language=o.language, beam_size=o.beam_size,
                compression_ratio_threshold=o.compression_ratio_threshold,
                log_prob_threshold=o.log_prob_threshold, no_speech_threshold=o.no_speech_threshold,
                window_pad_frames=o.window_pad_frames, min_window_frames=o.min_window_frames,
                timestamp_tokens=o.timestamp_tokens, hotwords=hotwords))

    def _words(self, segments: list, audio: np.ndarray, offset: float,
               hotwords: str | None = None) -> list[TimedWord]:
        """Words of a chunk's segments, past the hallucination checks, with file times."""
        o = self.opts
        length = audio.size / SAMPLE_RATE
        raw: list[TimedWord] = []
        for segment in segments:
            doubtful = segment.no_speech_prob >= o.doubtful_no_speech
            words = segment.words or []
            if doubtful and self._implausible(segment.avg_logprob, words):
                continue
            for w in words:
                if doubtful and w.probability < o.min_word_probability:
                    continue
                start = min(max(float(w.start), 0.0), length)
                end = min(max(float(w.end), start), length)
                raw.append(TimedWord(w.word, round(offset + start, 3), round(offset + end, 3),
                                     round(float(w.probability), 4)))
        words = _drop_prompt_echo(_join_pieces(raw), hotwords, o.prompt_echo_probability,
                                  o.prompt_word_floor)
        if o.snap_word_edges:
            words = snap_to_sound(words, audio, offset, SAMPLE_RATE)
        return collapse_repeats(normalise_words(words, formatted=True), o.max_repeats)

    def _implausible(self, avg_logprob: float, words: list) -> bool:
        if avg_logprob < self.opts.doubtful_log_prob:
            return True
        mean = sum(w.probability for w in words) / len(words) if words else 0.0
        return mean < self.opts.doubtful_word_probability


def _drop_prompt_echo(words: list[TimedWord], hotwords: str | None, trailing: float,
                      anywhere: float = 0.0) -> list[TimedWord]:
    """``words`` without those that echo the prompt: prompt words (in batch form) less
    likely than ``trailing`` at the end, or than ``anywhere`` wherever they are."""
    if not hotwords:
        return words
    prompt = set(normalise_text(hotwords))

    def echo(word: TimedWord, floor: float) -> bool:
        parts = normalise_text(word.text)
        return word.probability < floor and bool(parts) and set(parts) <= prompt

    end = len(words)
    while end and echo(words[end - 1], trailing):
        end -= 1
    return [w for w in words[:end] if not echo(w, anywhere)]


def _join_pieces(words: list[TimedWord]) -> list[TimedWord]:
    """Rejoin the pieces of one word that Whisper's word alignment split apart.

    Every word Whisper writes starts with a space; a piece without one (the
    "'clock" of " o" + "'clock") continues the word before it.
    """
    out: list[TimedWord] = []
    for w in words:
        if out and not w.text[:1].isspace():
            last = out[-1]
            out[-1] = TimedWord(last.text + w.text, last.start, w.end,
                                min(last.probability, w.probability))
        else:
            out.append(w)
    return out
