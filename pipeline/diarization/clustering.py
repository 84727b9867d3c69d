"""Speaker clustering of window embeddings with an automatic number of speakers.

Average-linkage agglomerative clustering on cosine similarity decides the speakers on at
most ``max_cluster_windows`` windows spread evenly over the file; every window is then
assigned to the nearest centroid. The pairwise matrix is therefore bounded and memory
grows linearly with audio length.
"""

from __future__ import annotations

import numpy as np
from scipy.cluster.hierarchy import fcluster, linkage

from .options import DiarizationOptions

__all__ = ["cluster_embeddings"]


def _centroids(emb: np.ndarray, labels: np.ndarray, k: int) -> np.ndarray:
    cents = np.zeros((k, emb.shape[1]), dtype=np.float64)
    np.add.at(cents, labels, emb)
    norm = np.linalg.norm(cents, axis=1, keepdims=True)
    return cents / np.maximum(norm, 1e-12)


def _compact(labels: np.ndarray) -> tuple[np.ndarray, int]:
    uniq, inv = np.unique(labels, return_inverse=True)
    return inv.astype(np.int64), len(uniq)


def _agglomerate(emb: np.ndarray, opts: DiarizationOptions,
                 speakers: int | None = None) -> np.ndarray:
    if len(emb) < 2:
        return np.zeros(len(emb), dtype=np.int64)
    tree = linkage(emb.astype(np.float64), method="average", metric="cosine")
    if speakers is not None:
        return fcluster(tree, t=speakers, criterion="maxclust") - 1
    return fcluster(tree, t=1.0 - opts.merge_similarity, criterion="distance") - 1


def cluster_embeddings(emb: np.ndarray, seconds: np.ndarray,
                       opts: DiarizationOptions, speakers: int | None = None) -> np.ndarray:
    """Label each window with a speaker index (0..k-1, arbitrary order).

    Args:
      emb: (n, d) unit-length window embeddings.
      seconds: (n,) speech seconds each window stands for (weights small-cluster pruning).
      opts: thresholds and the clustering sample bound.
      speakers: the number of speakers the client expects: the tree is cut into that many
        clusters (fewer only when there are fewer distinct windows) and no threshold merges
        them; None estimates the number.

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
    sample_labels, k = _compact(_agglomerate(emb[sample], opts, speakers))
    cents = _centroids(emb[sample], sample_labels, k)
    labels = np.argmax(emb @ cents.T, axis=1)
    labels, k = _compact(labels)
    if speakers is not None:
        return labels

    # Clusters too small to trust join their nearest large cluster.
    while k > 1:
        total = np.bincount(labels, weights=seconds, minlength=k)
        small = total < opts.min_speaker
        if not small.any() or small.all():
            break
        cents = _centroids(emb, labels, k)
        big = np.flatnonzero(~small)
        moved = np.isin(labels, np.flatnonzero(small))
        labels[moved] = big[np.argmax(emb[moved] @ cents[big].T, axis=1)]
        labels, k = _compact(labels)

    # Single-speaker guard: clusters whose centroids are close are one voice.
    while k > 1:
        cents = _centroids(emb, labels, k)
        sim = cents @ cents.T
        np.fill_diagonal(sim, -np.inf)
        i, j = np.unravel_index(np.argmax(sim), sim.shape)
        if sim[i, j] < opts.split_similarity:
            break
        labels[labels == j] = i
        labels, k = _compact(labels)
    return labels
