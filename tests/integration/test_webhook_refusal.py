"""A webhook_url that can never be delivered is refused at create time, on ``/v1`` and on
``/v2`` (through the ``assemblyai`` SDK), naming the setting that allows it; with the
setting on (the session stack), the same URL is taken.

The refusing gateway is a second ``a5s gateway`` in front of the session stack with
``A5S_WEBHOOKS__ALLOW_LOOPBACK=false`` (the production default): the check is the
gateway's alone, so nothing else needs another stack.
"""

from __future__ import annotations

from collections.abc import Iterator

import assemblyai as aai
import httpx
import pytest

from ops.stack import EVAL, Stack
from tests.integration.test_two_gateways import Gateway

pytestmark = [pytest.mark.stack, pytest.mark.timeout(300)]

SHORT = EVAL / "real" / "pocketsphinx" / "goforward.wav"
SETTING = "A5S_WEBHOOKS__ALLOW_LOOPBACK=true"


@pytest.fixture(scope="module")
def strict(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    gateway = Gateway(stack, tmp_path_factory.mktemp("strict") / "gateway.log")
    gateway.env["A5S_WEBHOOKS__ALLOW_LOOPBACK"] = "false"
    gateway.start()
    yield gateway
    gateway.stop()


def test_v1_refuses_a_loopback_webhook_unless_allowed(stack: Stack, strict: Gateway) -> None:
    _, key = stack.new_account()
    body = {"audio_url": "https://a.example/x.wav", "webhook_url": "http://127.0.0.1:9/hook"}
    headers = {"Authorization": f"Bearer {key}"}
    resp = httpx.post(f"{strict.base}/v1/transcripts", json=body, headers=headers)
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["code"] == "invalid_request" and error["param"] == "webhook_url"
    assert SETTING in error["message"] and "loopback" in error["message"]
    metadata_url = {**body, "webhook_url": "http://169.254.169.254/latest"}
    resp = httpx.post(f"{strict.base}/v1/transcripts", json=metadata_url, headers=headers)
    assert resp.status_code == 400 and "no setting allows" in resp.json()["error"]["message"]
    with stack.client(key) as c:  # nothing was created; the session stack allows loopback
        assert c.get("/v1/transcripts").json()["data"] == []
        made = c.post("/v1/transcripts", json=body)
        assert made.status_code == 201, made.text
        c.delete(f"/v1/transcripts/{made.json()['id']}")


def test_v2_refuses_it_in_assemblyais_error_shape(stack: Stack, strict: Gateway) -> None:
    _, key = stack.new_account()
    transcriber = aai.Transcriber(client=aai.Client(settings=aai.Settings(
        api_key=key, base_url=strict.base, http_timeout=60.0)))
    config = aai.TranscriptionConfig(webhook_url="http://localhost:9/hook")
    with pytest.raises(aai.types.TranscriptError) as error:
        transcriber.submit(transcriber.upload_file(str(SHORT)), config=config)
    assert error.value.status_code == 400 and SETTING in str(error.value), str(error.value)
    resp = httpx.post(f"{strict.base}/v2/transcript", headers={"Authorization": key},
                      json={"audio_url": "https://a.example/x.wav",
                            "webhook_url": "http://[::1]:9/hook"})
    assert resp.status_code == 400 and set(resp.json()) == {"error"}
    assert SETTING in resp.json()["error"]
