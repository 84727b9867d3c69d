"""The models a streaming worker loads once and shares across its sessions."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from pipeline.models import resolve_whisper

from .decoder import WhisperDecoder
from .vad import StreamingVad, default_vad_path

__all__ = ["StreamingModels", "ModelOptions"]


class ModelOptions(BaseModel):
    """How the Whisper models run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    compute_type: str = Field("int8", description="CTranslate2 compute type.")
    cpu_threads: int = Field(1, ge=1, description="Intra-op threads per decode call.")
    num_workers: int = Field(2, ge=1, description=(
        "Decode calls one model runs at once; match the engine's ``decode_workers``."))


class StreamingModels:
    """VAD plus the Whisper model(s) of ``a5s-v2-streaming``: a per-process resource.

    Partials come from ``partial_dir``; finals from ``final_dir`` (the same model when
    omitted). A partial's result never stands for a final, even from one model: partials
    decode with a smaller window.

    Args:
        vad_path: Silero VAD ONNX file (:func:`~pipeline.realtime.vad.default_vad_path`).
        partial_dir: CTranslate2 Whisper directory for partial decodes.
        final_dir: CTranslate2 Whisper directory for final decodes (default: ``partial_dir``).
        options: threading and compute type.
    """

    def __init__(self, vad_path: str | Path, partial_dir: str | Path,
                 final_dir: str | Path | None = None, options: ModelOptions = ModelOptions()) -> None:
        self.options = options
        self.vad = StreamingVad(vad_path)
        kwargs = dict(compute_type=options.compute_type, cpu_threads=options.cpu_threads,
                      num_workers=options.num_workers)
        self.partial = WhisperDecoder(partial_dir, **kwargs)
        same = final_dir is None or Path(final_dir).resolve() == Path(partial_dir).resolve()
        self.final = self.partial if same else WhisperDecoder(final_dir, **kwargs)

    @property
    def shared(self) -> bool:
        """Whether partials and finals use one model (partial results can become finals)."""
        return self.final is self.partial

    @classmethod
    def from_specs(cls, cache_dir: Path, partial: str = "tiny.en", final: str | None = None,
                   options: ModelOptions = ModelOptions()) -> StreamingModels:
        """Load packaged models by alias or directory (see :func:`pipeline.models.resolve_whisper`).

        Args:
            cache_dir: where split packaged models are joined once.
            partial: Whisper model for partials (``tiny.en``, ``base`` or a directory).
            final: Whisper model for finals (default: the partial model).
        """
        partial_dir = resolve_whisper(partial, cache_dir)
        final_dir = resolve_whisper(final, cache_dir) if final else None
        return cls(default_vad_path(), partial_dir, final_dir, options)
