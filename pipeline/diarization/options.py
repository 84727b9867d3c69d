"""Options of the diarization stage."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["DiarizationOptions"]


class DiarizationOptions(BaseModel):
    """How audio is segmented, embedded, clustered into speakers and turned into turns.

    Times are seconds; similarities are cosine similarities of L2-normalised embeddings
    (1 = same direction). Defaults were calibrated with ``python -m bench.diarization``
    (see docs/diarization.md).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    step: float = Field(1.0, gt=0, description=(
        "Step between the starts of the segmentation model's 10 s windows, s. Every "
        "instant is judged by window/step windows; their votes are averaged."))
    pad: float = Field(1.0, ge=0, description=(
        "Audio this far either side of the VAD's speech is segmented too, s: VAD cuts "
        "soft and overlapped speech short."))
    join_gap: float = Field(5.0, ge=0, description=(
        "VAD speech regions closer than this are segmented as one stretch, s; longer "
        "silences are skipped."))
    embed_every: int = Field(3, ge=1, description=(
        "Only every n-th window is embedded; the local speakers of the others take the "
        "global speaker they coincide with in the nearest embedded windows. Bounds the "
        "embedding cost while the segmentation keeps a fine step."))
    embed_max: float = Field(3.0, gt=0, description=(
        "At most this much of a local speaker's clean (non-overlapped) speech, nearest "
        "the window's centre, is embedded, s."))
    embed_min: float = Field(0.5, gt=0, description=(
        "A local speaker needs this much clean speech in a window to be embedded, s."))
    piece: float = Field(1.0, gt=0, description=(
        "A local speaker's clean speech in the part of an embedded window nearest its "
        "centre is also embedded in pieces this long, s: the segmentation model may give "
        "two voices that alternate without a pause one local speaker."))
    change_similarity: float = Field(0.40, ge=-1, le=1, description=(
        "A local speaker's pieces form groups by average-linkage clustering down to this "
        "similarity; with more than one group, the groups are clustered as speakers of "
        "their own and each frame takes the group of the nearest piece."))
    cluster_min: float = Field(1.0, gt=0, description=(
        "Embeddings from less clean speech than this, s, do not decide the clusters; "
        "they are only assigned to them."))
    merge_similarity: float = Field(0.57, ge=-1, le=1, description=(
        "Agglomerative clustering stops when the average similarity between the two "
        "closest clusters falls below this."))
    split_similarity: float = Field(0.65, ge=-1, le=1, description=(
        "Single-speaker guard: clusters whose centroids are more similar than this are "
        "one speaker."))
    same_similarity: float = Field(0.75, ge=-1, le=1, description=(
        "Single-speaker guard: clusters whose centroids are more similar than this are one "
        "speaker even where the segmentation heard both in one window, if in fewer than "
        "half the windows of the smaller one. 1: never."))
    min_speaker: float = Field(2.0, ge=0, description=(
        "Speech a cluster needs, s, to stand as a speaker of its own; smaller clusters "
        "join their nearest speaker (short interjections rarely embed reliably)."))
    max_cluster_windows: int = Field(1500, ge=10, description=(
        "At most this many embeddings enter the pairwise clustering; the rest are "
        "assigned to the nearest centroid, so memory stays linear in audio length."))
    speech_margin: float = Field(0.0, ge=-0.3, description=(
        "Turns keep only the frames within this distance of the VAD's speech regions, s "
        "(negative: that far inside them; the short-speech path's turns too). The "
        "segmentation still hears the padded stretches around them for context, but "
        "where Silero hears no speech the segmentation's activity was mostly false alarm "
        "(a stretch's first window starting early, pauses talked through)."))
    short_onset: float = Field(0.2, ge=0, le=1, description=(
        "Files with under two min_speaker of VAD speech (one speaker, no embeddings) keep, "
        "inside each VAD region, the frames where the segmentation model's probability "
        "that anyone speaks, averaged over its windows, reaches this; a region it hears "
        "nothing of stays whole. 0: the VAD's regions as they are. Only files at least "
        "one model window (10 s) long: shorter clips give the model too little context."))
    pause_reach: float = Field(1.0, ge=0, description=(
        "A direct change from one speaker to another moves to the nearest edge of the "
        "VAD's speech regions (a pause Silero heard) within this distance, s: the 1 s "
        "pieces and the window step place a change only to about a second, while people "
        "mostly take turns at pauses, which the segmentation model often talks through."))
    follow_regions: bool = Field(True, description=(
        "Local speakers of windows without embeddings take, frame by frame, the speaker "
        "of the local speaker they coincide with in the embedded window nearest that "
        "frame, rather than one speaker for the whole window: where the segmentation "
        "hears two alternating voices as one local speaker, each instant follows the "
        "embeddings made there."))
    overlap_onset: float = Field(0.3, ge=0, le=1, description=(
        "Frames where the segmentation model's probability that two speak at once, "
        "averaged over its windows, reaches this hold two speakers even where most "
        "windows' hard (argmax) labels hear one; the second is the speaker whose local "
        "speakers the model gives most probability besides the first. 0: off."))
    min_gap: float = Field(0.1, ge=0, description=(
        "Pauses of one speaker shorter than this, s, are bridged."))
    batch_size: int = Field(8, ge=1, description=(
        "Windows per segmentation forward pass, and feature blocks per embedding pass."))
