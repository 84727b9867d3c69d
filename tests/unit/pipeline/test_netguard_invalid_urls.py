"""URLs that httpx itself cannot parse are a job error or a failed delivery, never a crash.

``0177.0.0.1`` is 127.0.0.1 to libc but an invalid IPv4 literal to httpx; before the fix it
escaped ``download`` as ``httpx.InvalidURL`` and the job ended in ``internal_error`` after
three retries, and a webhook to it was retried forever as a store failure.
"""

from __future__ import annotations

import asyncio
import io

import pytest

from pipeline.downloads import download
from security.addresses import AddressPolicy
from security.netguard import DeliveryError, post_json
from schemas.errors import JobFailed

URLS = ["http://0177.0.0.1:1/a.wav", "http://1.2.3.4.5:1/a.wav", "http://[::1:1/a.wav"]


@pytest.mark.parametrize("url", URLS)
def test_download_fails_with_download_failed(url: str) -> None:
    with pytest.raises(JobFailed) as caught:
        asyncio.run(download(url, io.BytesIO(), policy=AddressPolicy(), timeout_s=5))
    assert caught.value.code == "download_failed"


@pytest.mark.parametrize("url", URLS)
def test_webhook_post_is_a_delivery_error(url: str) -> None:
    with pytest.raises(DeliveryError):
        asyncio.run(post_json(url, b"{}", {}, policy=AddressPolicy(), timeout_s=5))
