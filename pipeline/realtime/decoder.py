"""Batched Whisper decoding of short live segments on CTranslate2.

faster-whisper's ``transcribe()`` pads every call to a 30 s window and decodes one audio
at a time. For live segments of 1-14 s that wastes most of the encoder time, so this
module calls the CTranslate2 model directly: features of each segment, a window of the
segment plus trailing zero frames, one batched ``encode`` and one batched ``generate``.

Whisper may stop before the end of its audio: after a change of speaker (two voices
overlapping, or one answering at once) it often writes the first phrase and then the
end-of-text token, and the rest of a 10 s segment is silently lost. Decodes therefore run
with timestamp tokens; the last one says how far the text reaches, and audio left after it
is decoded again on its own (``continue_after_s``), as Whisper's own long-form loop does.

A decode may also stop without a closing timestamp (base writes "Men" for the 2 s "Mend the
coat before you go out" and then end-of-text): the text then ended somewhere the tokens do
not say. Only for such a decode, the text is aligned to the audio (CTranslate2's
cross-attention alignment on the encoder output already computed, ~0.03 s) and the start of
its last word (the end of a one-word text) stands for the missing timestamp, so the rest is
decoded again as above, the repeated word merged away. It goes on from
``continue_unclosed_after_s`` of rest, since the stop is certain (a rest of 0.8 s held "worth
it" in conv03_overlap); the decode of a rest that short is kept only when Whisper is sure of
it (base heard "16 team" and "all year 4 year" there). An unclosed last sentence that
restates the start of an earlier one is a loop's beginning and is dropped (base with beam 5:
"and the coat before you go out. and the coat before").

The token budget (``max_tokens_per_second``) bounds a decode: CTranslate2's Whisper generates
at most half of ``max_length`` (Whisper's sample length, half the text context), so a decode
gets 4 tokens plus 4 per second of audio after its prompt. A fast talker's long segment can
reach that (conv03_overlap): such a decode ends without a closing timestamp and its rest is
continued as above. A loop reaches it too, and the short encoder window is what makes tiny.en
loop on some short segments: "five five" (``cards/004.wav``) decoded in a 10 s window gave
"5, 5, 5, 5, 5" up to the budget for 22 of 49 cuts of its start and end (and "5" for 16 more),
in Whisper's own 30 s window "5 5" for all 49. A decode that ran into the budget is therefore
decoded once more in the window Whisper was trained on (``runaway_window_frames``), as the
batch path decodes every chunk; the second decode is kept when it ends within the budget.

Only a decode's first pass uses ``DecodeOptions.beam_size``: continuations and the second
decode of a runaway are greedy, which gave the same dev-item WER for less CPU.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import ctranslate2
import numpy as np
from faster_whisper import WhisperModel
from faster_whisper.tokenizer import Tokenizer

from .options import DecodeOptions

__all__ = ["WhisperDecoder", "DecodeInput", "Decoded", "drop_restated_tail", "merge_overlap"]

_FULL_WINDOW = 3000


@dataclass(frozen=True, slots=True)
class DecodeInput:
    """One audio to decode.

    Attributes:
        audio: float32 mono 16 kHz, at most ~29 s.
        prompt: the decoder prompt from :meth:`WhisperDecoder.prompt`; inputs batch
            together only when their prompts have the same length.
    """

    audio: np.ndarray
    prompt: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Decoded:
    """Punctuated, cased text of one input ('' when judged non-speech)."""

    text: str
    no_speech_prob: float
    avg_logprob: float
    continued: int = 0
    """How many times the rest of the audio was decoded again after an early stop."""
    silent: bool = False
    """Whisper's own no-speech rule (``DecodeOptions.no_speech_threshold``) judged it
    non-speech. The text is kept: the caller weighs it against what the VAD heard (tiny.en
    judged a clearly spoken, 0.4 s "Added." at the very end of a stream non-speech)."""
    widened: bool = False
    """The first decode ran into the token budget (a loop) and this is its second decode, in
    the window of ``DecodeOptions.runaway_window_frames``."""


def drop_restated_tail(text: str) -> str:
    """``text`` without an unfinished last sentence that repeats the start of an earlier one.

    "and the coat before you go out. and the coat before" -> "and the coat before you go
    out."; two words at least, so that a real repeated word stays.
    """
    parts = [p for p in re.split(r"(?<=[.?!])\s+", text.strip()) if p]
    if len(parts) < 2 or parts[-1][-1] in ".?!":
        return text
    words = lambda s: re.sub(r"[^\w\s']", " ", s.lower()).split()  # noqa: E731
    tail = words(parts[-1])
    if len(tail) >= 2 and any(words(p)[:len(tail)] == tail for p in parts[:-1]):
        return " ".join(parts[:-1])
    return text


def merge_overlap(text: str, more: str) -> str:
    """``text`` and ``more`` joined, without the words ``more`` starts with that ``text``
    ends with (a continuation may decode again the last word or two it was given)."""
    key = lambda w: re.sub(r"[^\w']", "", w.lower())  # noqa: E731
    have, new = text.split(), more.split()
    for n in range(min(3, len(have), len(new)), 0, -1):
        if [key(w) for w in have[-n:]] == [key(w) for w in new[:n]]:
            new = new[n:]
            break
    return " ".join(have + new)


class WhisperDecoder:
    """A Whisper CTranslate2 model directory, loaded once, decoded in batches.

    Thread-safe: CTranslate2 runs up to ``num_workers`` calls at once, each on
    ``cpu_threads`` threads.

    Args:
        model_dir: a CTranslate2 Whisper directory (``model.bin``, ``config.json``,
            ``tokenizer.json``).
        compute_type: CTranslate2 compute type; int8 is fastest on AVX2 CPUs.
        cpu_threads: intra-op threads per call.
        num_workers: calls that can run concurrently.
    """

    def __init__(self, model_dir: str | Path, *, compute_type: str = "int8",
                 cpu_threads: int = 1, num_workers: int = 2) -> None:
        fw = WhisperModel(str(model_dir), device="cpu", compute_type=compute_type,
                          cpu_threads=cpu_threads, num_workers=num_workers)
        self.model_dir = Path(model_dir)
        self._model: ctranslate2.models.Whisper = fw.model
        self._features = fw.feature_extractor
        self._tokenizer = Tokenizer(fw.hf_tokenizer, fw.model.is_multilingual,
                                    task="transcribe", language="en")
        self._max_length = fw.max_length
        self._base_prompt = tuple(self._tokenizer.sot_sequence)
        self._timestamp_begin = self._tokenizer.timestamp_begin

    def prompt(self, hotwords: str = "") -> tuple[int, ...]:
        """Decoder prompt, optionally preceded by hotwords as 'previous text'.

        Hotwords are cut to a quarter of the context so they cannot crowd out the output.
        The prompt leaves timestamps on (see the module notes); ``DecodeOptions.timestamps``
        turns them off per decode.
        """
        if not hotwords:
            return self._base_prompt
        tokens = self._tokenizer.encode(" " + hotwords.strip())[: self._max_length // 4]
        return (self._tokenizer.sot_prev, *tokens, *self._base_prompt)

    def decode(self, inputs: Sequence[DecodeInput], options: DecodeOptions) -> list[Decoded]:
        """Decode a batch (all prompts must have one length). Blocking; run in a pool.

        With ``options.timestamps``, audio after the text's last timestamp (more than
        ``options.continue_after_s`` of it) is decoded again and its text appended, up to
        ``options.max_continuations`` times per input.
        """
        if not inputs:
            return []
        if len({len(i.prompt) for i in inputs}) != 1:
            raise ValueError("a batch needs prompts of one length")
        if not options.timestamps:
            inputs = [DecodeInput(i.audio, (*i.prompt, self._tokenizer.no_timestamps))
                      for i in inputs]
            return [d for d, _, _ in self._decode_once(inputs, options)]
        out = self._decode_once(inputs, options)
        results = [d for d, _, _ in out]
        todo = [(k, reached, unclosed) for k, (_, reached, unclosed) in enumerate(out)]
        offsets = [0] * len(inputs)
        for round_ in range(options.max_continuations):
            rest = []
            for k, reached, unclosed in todo:
                start = offsets[k] + int(reached * 16000)
                least = options.continue_unclosed_after_s if unclosed else options.continue_after_s
                if reached > 0 and (len(inputs[k].audio) - start) / 16000 > least:
                    offsets[k] = start
                    rest.append(k)
            if not rest:
                break
            more = self._decode_once([DecodeInput(inputs[k].audio[offsets[k]:], inputs[k].prompt)
                                      for k in rest], options.greedy())
            todo = []
            for k, (extra, reached, unclosed) in zip(rest, more):
                short = len(inputs[k].audio) - offsets[k] <= options.continue_after_s * 16000
                unsure = short and (extra.no_speech_prob >= options.doubtful_no_speech
                                    or extra.avg_logprob < options.log_prob_threshold)
                # inside a VAD segment: the no-speech rule, and for a short rest a sure decode
                if extra.text and not extra.silent and not unsure:
                    prev = results[k]
                    results[k] = Decoded(merge_overlap(prev.text, extra.text), prev.no_speech_prob,
                                         prev.avg_logprob, round_ + 1, prev.silent,
                                         prev.widened)
                    todo.append((k, reached, unclosed))
        return results

    def _decode_once(self, inputs: Sequence[DecodeInput],
                     options: DecodeOptions) -> list[tuple[Decoded, float, bool]]:
        """One batched pass: each input's result, how far its text reaches, s (0 when the
        output has no timestamp), and whether it stopped without a closing timestamp.

        An input whose decode ran into the token budget is decoded once more in the window
        of ``options.runaway_window_frames``; that result replaces it unless it ran into the
        budget too (a long text, not a loop: its rest is continued as before)."""
        out = self._pass(inputs, options)
        runaway = [k for k, (_, _, _, cut) in enumerate(out) if cut]
        if runaway and options.min_frames < options.runaway_window_frames:
            wide = options.greedy().model_copy(
                update={"min_frames": options.runaway_window_frames})
            again = self._pass([inputs[k] for k in runaway], wide)
            for k, (d, reached, unclosed, cut) in zip(runaway, again):
                if not cut:
                    out[k] = (Decoded(d.text, d.no_speech_prob, d.avg_logprob, silent=d.silent,
                                      widened=True), reached, unclosed, cut)
        return [(d, reached, unclosed) for d, reached, unclosed, _ in out]

    def _pass(self, inputs: Sequence[DecodeInput],
              options: DecodeOptions) -> list[tuple[Decoded, float, bool, bool]]:
        """:meth:`_decode_once` without the second decode of a runaway; the last item says
        whether the decode ran into its token budget."""
        feats = [self._features(i.audio) for i in inputs]
        longest = max(f.shape[-1] for f in feats)
        window = min(_FULL_WINDOW, max(options.min_frames, longest + options.trailing_pad_frames))
        batch = np.zeros((len(feats), feats[0].shape[0], window), dtype=np.float32)
        for row, f in zip(batch, feats):
            n = min(window, f.shape[-1])
            row[:, :n] = f[:, :n]
        encoded = self._model.encode(ctranslate2.StorageView.from_array(batch))
        prompt = len(inputs[0].prompt)
        budgets = [8 + math.ceil(len(i.audio) / 16000 * options.max_tokens_per_second)
                   for i in inputs]
        max_length = min(self._max_length, prompt + max(budgets))
        results = self._model.generate(
            encoded, [list(i.prompt) for i in inputs], beam_size=options.beam_size,
            max_length=max_length, return_scores=True, return_no_speech_prob=True,
            suppress_blank=True, suppress_tokens=[-1])
        out = []
        unclosed: list[int] = []
        for k, r in enumerate(results):
            tokens = r.sequences_ids[0]
            # CTranslate2 returns the length-normalised score; undo to faster-whisper's average.
            avg = r.scores[0] * len(tokens) / (len(tokens) + 1) if r.scores else 0.0
            silent = (r.no_speech_prob > options.no_speech_threshold
                      and avg < options.log_prob_threshold)
            text = self._tokenizer.decode(tokens).strip()
            stamps = [t for t in tokens if t >= self._timestamp_begin]
            heard = text and not silent
            reached = (stamps[-1] - self._timestamp_begin) * 0.02 if stamps and heard else 0.0
            # CTranslate2's Whisper generates at most max_length // 2 tokens (Whisper's sample
            # length: half the text context); a short input batched with a longer one is held
            # to its own budget.
            cut = len(tokens) >= min(max_length, prompt + budgets[k]) // 2
            if heard and options.timestamps and tokens[-1] < self._timestamp_begin:
                unclosed.append(k)
                text = drop_restated_tail(text)
            out.append((Decoded(text, r.no_speech_prob, avg, silent=silent), reached, False, cut))
        for k, at in zip(unclosed, self._resume_points(encoded, unclosed, results, feats)):
            d, reached, _, cut = out[k]
            out[k] = (d, max(reached, at), True, cut)
        return out

    def _resume_points(self, encoded: ctranslate2.StorageView, rows: list[int],
                       results: Sequence[ctranslate2.models.WhisperGenerationResult],
                       feats: Sequence[np.ndarray]) -> list[float]:
        """Where decoding of each of ``rows`` goes on, s, by aligning its text tokens to the
        encoder output (Whisper's word-timestamp method): the start of its last word, whose
        aligned end is the least sure (in conv03_overlap it ran 0.3 s into "worth it"), or
        the end of the text when it is one word. The repeated word is merged away."""
        if not rows:
            return []
        enc = np.asarray(encoded)
        if len(rows) < enc.shape[0]:
            encoded = ctranslate2.StorageView.from_array(np.ascontiguousarray(enc[rows]))
        texts = [[t for t in results[k].sequences_ids[0] if t < self._tokenizer.eot]
                 for k in rows]
        aligned = self._model.align(encoded, list(self._tokenizer.sot_sequence), texts,
                                    [min(feats[k].shape[-1], 2 * enc.shape[1]) for k in rows])
        points = []
        for text, a in zip(texts, aligned):
            # The path is (token index, encoder frame) pairs, 20 ms frames; the index of
            # end-of-text is len(text).
            _, words = self._tokenizer.split_to_word_tokens(text + [self._tokenizer.eot])
            first = len(text) - len(words[-2]) if len(words) > 2 else len(text)
            points.append(min((f for i, f in a.alignments if i >= first), default=0) * 0.02)
        return points

