"""Speaker clustering of window embeddings with an automatic number of speakers.

Average-linkage agglomerative clustering on cosine similarity decides the speakers on at
most ``max_cluster_windows`` windows spread evenly over the file; every window is then
assigned to the nearest centroid. The pairwise matrix is therefore bounded and memory
grows linearly with audio length.

A job's speaker bounds (``SpeakerCount``) clip the estimated number: when the estimate
falls outside them, the tree is cut again at the nearest bound, so the thresholds decide
only whether the count needs clipping, never the clusters at the clipped count.
"""

from __future__ import annotations

import numpy as np
from scipy.cluster.hierarchy import fcluster, linkage

from schemas.records import SpeakerCount

from .options import DiarizationOptions

__all__ = ["cluster_embeddings", "l2_centroids"]


def l2_centroids(emb: np.ndarray, labels: np.ndarray, k: int) -> np.ndarray:
    """(k, d) unit-length mean direction of each label's rows."""
    cents = np.zeros((k, emb.shape[1]), dtype=np.float64)
    np.add.at(cents, labels, emb)
    norm = np.linalg.norm(cents, axis=1, keepdims=True)
    return cents / np.maximum(norm, 1e-12)


def _compact(labels: np.ndarray) -> tuple[np.ndarray, int]:
    uniq, inv = np.unique(labels, return_inverse=True)
    return inv.astype(np.int64), len(uniq)


def _apart(groups: np.ndarray, tracks: np.ndarray | None) -> np.ndarray:
    """(n, n) cannot-link: rows of one group, unless they are parts of one track."""
    apart = groups[:, None] == groups[None, :]
    if tracks is not None:
        apart &= tracks[:, None] != tracks[None, :]
    return apart


def _agglomerate(emb: np.ndarray, opts: DiarizationOptions, groups: np.ndarray | None = None,
                 speakers: int | None = None, tracks: np.ndarray | None = None) -> np.ndarray:
    if len(emb) < 2:
        return np.zeros(len(emb), dtype=np.int64)
    if groups is None or not (_apart(groups, tracks) & ~np.eye(len(groups), dtype=bool)).any():
        tree = linkage(emb.astype(np.float64), method="average", metric="cosine")
        if speakers is not None:
            return fcluster(tree, t=speakers, criterion="maxclust") - 1
        return fcluster(tree, t=1.0 - opts.merge_similarity, criterion="distance") - 1
    return _constrained_average(emb, _apart(groups, tracks), opts.merge_similarity, speakers)


def _constrained_average(emb: np.ndarray, apart: np.ndarray, stop: float,
                         clusters: int | None = None) -> np.ndarray:
    """Average-linkage clustering on cosine similarity where rows marked ``apart`` never
    merge.

    With ``clusters`` (a count the client gave) merging goes on to that count, whatever the
    similarity; the constraint gives way only when it alone keeps more clusters apart.

    O(n^2) memory and O(n^3) worst-case time in numpy: callers bound n.
    """
    n = len(emb)
    x = emb.astype(np.float64)
    sim = x @ x.T
    apart = apart.copy()
    size = np.ones(n)
    alive = np.ones(n, dtype=bool)
    labels = np.arange(n)
    eff = np.where(apart, -np.inf, sim)
    np.fill_diagonal(eff, -np.inf)
    while True:
        flat = int(np.argmax(eff))
        i, j = divmod(flat, n)
        if clusters is not None:
            if alive.sum() <= clusters:
                break
            if not np.isfinite(eff[i, j]):  # only the constraint is left: lift it
                apart[:] = False
                eff = np.where(alive[:, None] & alive[None, :], sim, -np.inf)
                np.fill_diagonal(eff, -np.inf)
                continue
        elif not np.isfinite(eff[i, j]) or eff[i, j] < stop:
            break
        # Lance-Williams update for average linkage; j folds into i.
        sim[i] = (size[i] * sim[i] + size[j] * sim[j]) / (size[i] + size[j])
        sim[:, i] = sim[i]
        size[i] += size[j]
        apart[i] |= apart[j]
        apart[:, i] = apart[i]
        alive[j] = False
        labels[labels == j] = i
        eff[i] = np.where(apart[i] | ~alive, -np.inf, sim[i])
        eff[:, i] = eff[i]
        eff[i, i] = -np.inf
        eff[j] = -np.inf
        eff[:, j] = -np.inf
    return labels


def cluster_embeddings(emb: np.ndarray, seconds: np.ndarray, opts: DiarizationOptions,
                       groups: np.ndarray | None = None,
                       speakers: SpeakerCount | None = None,
                       tracks: np.ndarray | None = None) -> np.ndarray:
    """Label each window with a speaker index (0..k-1, arbitrary order).

    Args:
      emb: (n, d) unit-length window embeddings.
      seconds: (n,) speech seconds each window stands for (weights small-cluster pruning).
      opts: thresholds and the clustering sample bound.
      groups: (n,) optional group of each row (its segmentation window): rows of one
        group are different speakers and never merge in the agglomerative step.
      speakers: bounds on the number of speakers the client expects. The number is
        estimated, then clipped into them; a clipped (or exact) count cuts the tree at that
        many clusters and no threshold or pruning changes it (fewer only when there are
        fewer distinct rows). None: no bounds.
      tracks: (n,) optional local track of each row: rows of one group and one track are
        parts of one local speaker cut where its voice changed, and may merge.

    Returns:
      (n,) int labels.
    """
    n = len(emb)
    if n < 2:
        return np.zeros(n, dtype=np.int64)
    if n > opts.max_cluster_windows:
        sample = np.unique(np.linspace(0, n - 1, opts.max_cluster_windows).round().astype(int))
    else:
        sample = np.arange(n)
    count = speakers or SpeakerCount()
    if count.exact is not None:
        return _cut(emb, sample, opts, groups, tracks, count.exact)
    labels = _estimate(emb, seconds, sample, opts, groups, tracks)
    found = int(labels.max()) + 1
    clipped = count.clip(found)
    return labels if clipped == found else _cut(emb, sample, opts, groups, tracks, clipped)


def _cut(emb: np.ndarray, sample: np.ndarray, opts: DiarizationOptions,
         groups: np.ndarray | None, tracks: np.ndarray | None,
         clusters: int | None) -> np.ndarray:
    """The sample's tree cut at ``clusters`` (None: at the merge threshold), every row
    assigned to the nearest centroid."""
    sample_labels, k = _compact(_agglomerate(
        emb[sample], opts, None if groups is None else groups[sample], clusters,
        None if tracks is None else tracks[sample]))
    cents = l2_centroids(emb[sample], sample_labels, k)
    labels, _ = _compact(np.argmax(emb @ cents.T, axis=1))
    return labels


def _estimate(emb: np.ndarray, seconds: np.ndarray, sample: np.ndarray,
              opts: DiarizationOptions, groups: np.ndarray | None,
              tracks: np.ndarray | None) -> np.ndarray:
    """Labels with the number of speakers the thresholds find."""
    labels = _cut(emb, sample, opts, groups, tracks, None)
    k = int(labels.max()) + 1

    # Clusters too small to trust join their nearest large cluster.
    while k > 1:
        total = np.bincount(labels, weights=seconds, minlength=k)
        small = total < opts.min_speaker
        if not small.any() or small.all():
            break
        cents = l2_centroids(emb, labels, k)
        big = np.flatnonzero(~small)
        moved = np.isin(labels, np.flatnonzero(small))
        labels[moved] = big[np.argmax(emb[moved] @ cents[big].T, axis=1)]
        labels, k = _compact(labels)

    # Single-speaker guard: clusters whose centroids are close are one voice, unless the
    # segmentation heard both in one window (as different local speakers). That evidence
    # gives way where the two are as alike as one voice's own parts (``same_similarity``)
    # and were heard apart in most windows of the smaller one: over a long file the model
    # hears one voice as two here and there (two recordings of one person, far-field).
    while k > 1:
        cents = l2_centroids(emb, labels, k)
        sim = cents @ cents.T
        np.fill_diagonal(sim, -np.inf)
        if groups is not None:
            shared = _shared(labels, k, groups)
            if tracks is not None:  # parts of one track are not two voices heard at once
                shared -= _shared(labels, k, groups * (int(tracks.max()) + 1) + tracks)
            windows = np.diag(_shared(labels, k, groups))
            rare = 2 * shared < np.minimum(windows[:, None], windows[None, :])
            sim[(shared > 0) & ~(rare & (sim >= opts.same_similarity))] = -np.inf
        i, j = np.unravel_index(np.argmax(sim), sim.shape)
        if sim[i, j] < opts.split_similarity:
            break
        labels[labels == j] = i
        labels, k = _compact(labels)
    return labels


def _shared(labels: np.ndarray, k: int, groups: np.ndarray) -> np.ndarray:
    """(k, k) number of groups both clusters have rows in."""
    by_group = np.unique(groups, return_inverse=True)[1]
    seen = np.zeros((k, by_group.max() + 1), dtype=np.int64)
    np.add.at(seen, (labels, by_group), 1)
    seen = (seen > 0).astype(np.int64)
    return seen @ seen.T
