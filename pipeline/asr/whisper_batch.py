"""Whisper on several chunks at once: one encoder call, one beam search, one alignment.

faster-whisper's ``BatchedInferencePipeline`` decodes a batch at the first
temperature only and never skips silence, so it would drop the hallucination
guards of :mod:`pipeline.asr.whisper`. This module reuses faster-whisper's own
pieces (feature extractor, prompt, timestamp splitting, word-timestamp
post-processing) around three batched CTranslate2 calls (``encode``,
``generate``, ``align``) and keeps, item by item, the rules of faster-whisper's
sequential loop (``WhisperModel.generate_segments`` with
``generate_with_fallback``) at temperature 0 for a chunk of at most 30 s:

* a result the sequential loop would retry at a higher temperature (too
  compressible, or a mean log-probability below the threshold, unless it is
  silence) is handed back as ``None``: the caller decodes that chunk alone,
  through the whole temperature ladder;
* silence (no-speech probability above its threshold with a low log-probability)
  gives no segments;
* a window whose last segment is unfinished (the sequential loop would decode a
  second window from the last word) is also handed back as ``None``.

Every other item gets the segments, words and scores the sequential loop gives.
Batched and sequential GEMMs may round differently, so a rare word can differ.

With ``timestamp_tokens`` off, the prompt ends in ``<|notimestamps|>``: on a GPU,
CTranslate2's beam search with timestamp rules costs per step about the square of
its rows (a chunk in a batch of 32 costs three times its cost alone), and without them
a ninth of it (docs/scaling.md). The word times come from the alignment either way, so a chunk
gives one segment whose words carry the times. Nothing then says that Whisper
stopped before the end of its speech (after a change of speaker it may write the
first phrase and end-of-text); instead, an item with more than
:data:`UNFINISHED_S` of loud frames after its last aligned word is handed back as
``None``, and the sequential loop (with timestamps) decodes it. So is an item whose
text is one phrase written twice: on a word alone in its window ("four", "press"),
tiny.en without timestamps wrote it twice in 14 of the eval set's 335 items, where
with them it closed the segment after the first.

With ``window_pad_frames`` set, the encoder window is fitted to the chunks
instead of padded to 30 s (see :func:`window_frames`): the single-chunk path of
:class:`~pipeline.asr.whisper.WhisperEngine` uses this module too, for that.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..types import SAMPLE_RATE
from .word_edges import FRAME_S, loud_frames

__all__ = ["BatchDecodeOptions", "decode_batch", "window_frames", "UNFINISHED_S"]

UNFINISHED_S = 0.5
"""Loud audio after the last aligned word (past :data:`_WORD_TAIL_S`) that marks a decode
without timestamps as stopped early, seconds."""
_WORD_TAIL_S = 0.3
"""Kept after the last word's aligned end: the alignment may end a word before its sound."""


@dataclass(frozen=True)
class BatchDecodeOptions:
    """The temperature-0 decoding options of one batch (see ``WhisperOptions``)."""

    language: str
    beam_size: int
    compression_ratio_threshold: float | None
    log_prob_threshold: float | None
    no_speech_threshold: float | None
    window_pad_frames: int | None = None
    """Encoder window = the longest chunk plus this many zero frames; ``None``: 30 s."""
    min_window_frames: int = 1000
    """The smallest fitted window, 10 ms frames."""
    timestamp_tokens: bool = True
    """Decode with timestamp tokens (faster-whisper's way); off: ``<|notimestamps|>``."""
    hotwords: str | None = None
    """Key terms written before the start of the transcript (faster-whisper's ``hotwords``
    prompt); None: no prompt."""


def window_frames(sizes: Sequence[int], opts: BatchDecodeOptions, full: int) -> int:
    """The encoder window of a batch, in feature frames.

    Whisper was trained on 30 s windows, and faster-whisper pads every chunk to one,
    so a 2 s prompt costs the encoder as much as 30 s of speech. A window fitted to
    the longest chunk plus a few seconds of padding costs a fraction of that; the
    padding keeps the decoder from looping at an abrupt end of the window.
    """
    if opts.window_pad_frames is None:
        return full
    return min(full, max(opts.min_window_frames, max(sizes) + opts.window_pad_frames))


_PUNCTUATION: tuple[str, str] | None = None


def _punctuation() -> tuple[str, str]:
    """faster-whisper's own defaults for merging punctuation into words."""
    global _PUNCTUATION
    if _PUNCTUATION is None:
        from faster_whisper import WhisperModel
        params = inspect.signature(WhisperModel.transcribe).parameters
        _PUNCTUATION = (params["prepend_punctuations"].default,
                        params["append_punctuations"].default)
    return _PUNCTUATION


class _Aligned:
    """Stands in for the model in ``WhisperModel.add_word_timestamps``.

    The alignment of every item was computed in one batched call; this hands one
    item's back, so faster-whisper's word post-processing runs unchanged, per item,
    with its own ``last_speech_timestamp`` (as in a sequential call per chunk).
    """

    def __init__(self, frames_per_second: float, alignment: list[dict[str, Any]]) -> None:
        self.frames_per_second = frames_per_second
        self._alignment = alignment

    def find_alignment(self, *_: Any) -> list[list[dict[str, Any]]]:
        return [self._alignment]


def decode_batch(model: Any, audios: Sequence[np.ndarray],
                 opts: BatchDecodeOptions) -> list[list[Any] | None]:
    """Decode chunks of at most 30 s together.

    Args:
        model: a loaded ``faster_whisper.WhisperModel``.
        audios: float32 16 kHz mono chunks, none empty.
        opts: decoding options.

    Returns:
        Per chunk, faster-whisper ``Segment`` objects with word timestamps (times
        within the chunk), or ``None`` where the chunk must be decoded alone.
    """
    from faster_whisper.audio import pad_or_trim
    from faster_whisper.tokenizer import Tokenizer
    from faster_whisper.transcribe import (Segment, Word, WhisperModel, get_compression_ratio,
                                           get_suppressed_tokens)
    from faster_whisper.utils import get_end

    if not audios:
        return []
    fe = model.feature_extractor
    tokenizer = Tokenizer(model.hf_tokenizer, model.model.is_multilingual, task="transcribe",
                          language=opts.language if model.model.is_multilingual else None)
    sizes: list[int] = []
    features = []
    for audio in audios:
        feats = fe(audio)
        size = min(fe.nb_max_frames, feats.shape[-1] - 1)
        sizes.append(size)
        features.append(feats[:, :size])
    window = window_frames(sizes, opts, fe.nb_max_frames)
    windows = [pad_or_trim(f, window) for f in features]
    encoder_output = model.encode(np.stack(windows))
    prompt = model.get_prompt(tokenizer, [], without_timestamps=not opts.timestamp_tokens,
                              hotwords=opts.hotwords)
    results = model.model.generate(
        encoder_output, [list(prompt) for _ in audios], beam_size=opts.beam_size, patience=1,
        length_penalty=1, repetition_penalty=1, no_repeat_ngram_size=0,
        max_length=model.max_length, return_scores=True, return_no_speech_prob=True,
        suppress_blank=True, suppress_tokens=get_suppressed_tokens(tokenizer, [-1]),
        max_initial_timestamp_index=int(round(1.0 / model.time_precision)))

    out: list[list[Any] | None] = [None] * len(audios)
    pending: dict[int, tuple[list[dict[str, Any]], int, bool, float, float]] = {}
    for i, result in enumerate(results):
        tokens = result.sequences_ids[0]
        avg_logprob = result.scores[0] * len(tokens) / (len(tokens) + 1)
        ratio = get_compression_ratio(tokenizer.decode(tokens).strip())
        no_speech = result.no_speech_prob
        low_logprob = opts.log_prob_threshold is not None and avg_logprob < opts.log_prob_threshold
        silent = opts.no_speech_threshold is not None and no_speech > opts.no_speech_threshold
        retry = (opts.compression_ratio_threshold is not None and
                 ratio > opts.compression_ratio_threshold) or low_logprob
        if retry and not (silent and low_logprob):
            continue  # None: the sequential ladder tries higher temperatures
        if silent and not (opts.log_prob_threshold is not None and
                           avg_logprob > opts.log_prob_threshold):
            out[i] = []
            continue
        segments, seek, single_ending = model._split_segments_by_timestamps(
            tokenizer=tokenizer, tokens=tokens, time_offset=0.0, segment_size=sizes[i],
            segment_duration=sizes[i] * fe.time_per_frame, seek=0)
        pending[i] = (segments, seek, single_ending, avg_logprob, ratio)

    alignments = _align(model, tokenizer, encoder_output, pending, sizes)
    prepend, append = _punctuation()
    for i, (segments, seek, single_ending, avg_logprob, ratio) in pending.items():
        WhisperModel.add_word_timestamps(_Aligned(model.frames_per_second, alignments[i]),
                                         [segments], tokenizer, None, sizes[i], prepend, append,
                                         0.0)
        if not opts.timestamp_tokens:
            if _unfinished(audios[i], get_end(segments) or 0.0) or _doubled(segments):
                continue  # None: stopped before the end of the speech, or looped
        elif not single_ending:
            last_word_end = get_end(segments)
            if last_word_end is not None and last_word_end > 0:
                seek = round(last_word_end * model.frames_per_second)
        if opts.timestamp_tokens and seek < sizes[i]:
            continue  # None: the sequential loop would decode a second window
        kept = []
        for s in segments:
            text = tokenizer.decode(s["tokens"])
            if s["start"] == s["end"] or not text.strip():
                continue
            kept.append(Segment(
                id=len(kept) + 1, seek=0, start=s["start"], end=s["end"], text=text,
                tokens=s["tokens"], avg_logprob=avg_logprob, compression_ratio=ratio,
                no_speech_prob=results[i].no_speech_prob, temperature=0.0,
                words=[Word(**w) for w in s["words"]]))
        out[i] = kept
    return out


def _unfinished(audio: np.ndarray, last_word_end: float) -> bool:
    """More than :data:`UNFINISHED_S` of loud frames after the last word (all frames count
    as loud in a chunk without a clear pause)."""
    loud = loud_frames(audio, SAMPLE_RATE)
    start = int(round((last_word_end + _WORD_TAIL_S) / FRAME_S))
    n = audio.size // int(SAMPLE_RATE * FRAME_S)
    tail = loud[start:] if loud is not None else np.ones(max(0, n - start), dtype=bool)
    return float(np.count_nonzero(tail)) * FRAME_S > UNFINISHED_S


def _doubled(segments: list[dict[str, Any]]) -> bool:
    """The words are one phrase written twice in a row."""
    words = [w["word"].strip(" .,!?").lower() for s in segments for w in s["words"]]
    half = len(words) // 2
    return half > 0 and len(words) == 2 * half and words[:half] == words[half:]


def _align(model: Any, tokenizer: Any, encoder_output: Any,
           pending: dict[int, tuple[list[dict[str, Any]], int, bool, float, float]],
           sizes: list[int]) -> dict[int, list[dict[str, Any]]]:
    """Word alignments of the kept items, one ``align`` call each over its row of the batch.

    One ``align`` call over the whole batch pads every item to the longest text and
    window: 8 chunks aligned together took 1.88 s of CPU against 0.73 s aligned one by
    one, and on a GPU alignment took most of a batch of 32 (``bench.throughput``). The
    encoder output is shared, not copied (:class:`_Row`).
    """
    from ctranslate2 import StorageView

    out: dict[int, list[dict[str, Any]]] = {}
    for i, (segments, *_rest) in pending.items():
        tokens = [t for s in segments for t in s["tokens"] if t < tokenizer.eot]
        if not tokens:
            out[i] = []
            continue
        row = _Row(encoder_output, i)  # held until the call returns: the view does not own it
        out[i] = model.find_alignment(tokenizer, [tokens], StorageView.from_array(row),
                                      [sizes[i]])[0]
    return out


class _Row:
    """Item ``index`` of a batched CTranslate2 storage as a one-item array, same memory.

    ``StorageView.from_array`` takes it through the array interface of the storage's
    device; the view does not own the memory, so this object holds the storage.
    """

    def __init__(self, storage: Any, index: int) -> None:
        name = "__array_interface__" if storage.device == "cpu" else "__cuda_array_interface__"
        iface = dict(getattr(storage, name))
        shape = tuple(iface["shape"])
        if iface.get("strides") is not None or not 0 <= index < shape[0]:
            raise ValueError("expected a contiguous batch holding the item")
        row_bytes = int(np.prod(shape[1:])) * np.dtype(iface["typestr"]).itemsize
        pointer, read_only = iface["data"]
        iface.update(shape=(1, *shape[1:]), data=(pointer + index * row_bytes, read_only))
        setattr(self, name, iface)
        self._storage = storage
