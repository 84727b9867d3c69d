"""``audio_url`` downloads as a job sees them: the guarded client's refusals and failures
become the job errors of the spec (``download_failed``, ``file_too_large``)."""

from __future__ import annotations

from typing import BinaryIO

from schemas.errors import JobErrorCode, JobFailed
from security.addresses import AddressPolicy
from security.netguard import DOWNLOAD_TIMEOUT_S, MAX_DOWNLOAD_BYTES, DownloadFailed, Resolver
from security.netguard import download as fetch

__all__ = ["download"]


async def download(url: str, dst: BinaryIO, *, policy: AddressPolicy,
                   max_bytes: int = MAX_DOWNLOAD_BYTES, timeout_s: float = DOWNLOAD_TIMEOUT_S,
                   resolver: Resolver | None = None) -> int:
    """:func:`security.netguard.download`, failing the job instead.

    Raises:
        JobFailed: ``file_too_large`` past ``max_bytes``; ``download_failed`` otherwise.
    """
    try:
        return await fetch(url, dst, policy=policy, max_bytes=max_bytes, timeout_s=timeout_s,
                           resolver=resolver)
    except DownloadFailed as exc:
        if exc.too_large:
            raise JobFailed(JobErrorCode.file_too_large, f"audio_url is {exc}") from exc
        raise JobFailed(JobErrorCode.download_failed,
                        f"audio_url could not be downloaded: {exc}") from exc
