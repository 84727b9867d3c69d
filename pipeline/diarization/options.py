"""Options of the diarization stage."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["DiarizationOptions"]


class DiarizationOptions(BaseModel):
    """How speech is cut into windows, clustered into speakers and turned into turns.

    Times are seconds; similarities are cosine similarities of L2-normalised embeddings
    (1 = same direction). Defaults were tuned with ``python -m ops.bench_diarization``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    window: float = Field(1.5, gt=0, description="Embedding window length, s.")
    hop: float = Field(0.75, gt=0, description="Step between window starts, s.")
    min_window: float = Field(0.4, gt=0, description=(
        "Shortest speech region that gets its own embedding, s; shorter ones take the "
        "speaker of the nearest embedded window."))
    merge_similarity: float = Field(0.5, ge=-1, le=1, description=(
        "Agglomerative clustering stops when the average similarity between the two "
        "closest clusters falls below this."))
    split_similarity: float = Field(0.65, ge=-1, le=1, description=(
        "Single-speaker guard: clusters whose centroids are more similar than this are "
        "one speaker."))
    min_speaker: float = Field(2.0, ge=0, description=(
        "Speech a cluster needs, s, to stand as a speaker of its own; smaller clusters "
        "join their nearest speaker (short interjections rarely embed reliably)."))
    max_cluster_windows: int = Field(1500, ge=10, description=(
        "At most this many windows enter the pairwise clustering; the rest are assigned "
        "to the nearest centroid, so memory stays linear in audio length."))
    batch_size: int = Field(16, ge=1, description="Windows per embedding forward pass.")
