"""``/v2``: the official ``assemblyai`` SDK against the embedded stack, base URL and key changed only.

A real two-speaker call from the eval set goes through upload, create, polling, captions,
list and delete; its webhook reaches a receiver on loopback in AssemblyAI's body shape with
a5s's signature. A broken file ends as the SDK's error status, and refused options and
other errors reach the SDK as ``{"error": "..."}``.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import assemblyai as aai
import httpx
import pytest
import srt

from a5s.webhooks import verify
from ops.stack import EVAL, EvalServer, Stack, free_port

pytestmark = pytest.mark.stack

CONVERSATION = EVAL / "synthetic" / "conv01_support_call.wav"  # 56 s, AGENT and CALLER
BROKEN = EVAL / "bad" / "broken" / "truncated_header.wav"
SHORT = EVAL / "real" / "pocketsphinx" / "goforward.wav"  # 2.8 s


class _Hooks(http.server.BaseHTTPRequestHandler):
    hits: list[tuple[dict[str, str], bytes]] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's spelling
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.hits.append(({k.lower(): v for k, v in self.headers.items()}, body))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def hooks() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), _Hooks)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/aai"
    server.shutdown()


@pytest.fixture(scope="module")
def account(stack: Stack) -> tuple[str, str, str]:
    """(account_id, key, webhook secret); the SDK is pointed at the stack with the key."""
    account_id, key = stack.new_account()
    secret = stack.console("GET", f"/accounts/{account_id}/webhook-secret")["webhook_secret"]
    aai.settings.base_url = stack.url("")
    aai.settings.api_key = key
    aai.settings.polling_interval = 1.0
    aai.settings.http_timeout = 60.0
    return account_id, key, secret


def test_sdk_transcribes_a_conversation(stack: Stack, account: tuple[str, str, str],
                                        hooks: str) -> None:
    _, key, secret = account
    config = aai.TranscriptionConfig(speaker_labels=True, speakers_expected=2, webhook_url=hooks,
                                     webhook_auth_header_name="X-Hook",
                                     webhook_auth_header_value="open-sesame")
    with stack.no_uncaught_errors():
        transcript = aai.Transcriber().transcribe(str(CONVERSATION), config=config)
    assert transcript.status == aai.TranscriptStatus.completed, transcript.error
    assert transcript.audio_duration == 56
    assert transcript.audio_url.startswith(stack.url("/v2/upload/file_"))
    assert "help desk" in transcript.text and "laptop" in transcript.text

    utterances = transcript.utterances
    assert utterances and {u.speaker for u in utterances} == {"A", "B"}
    assert utterances[0].speaker == "A" and "help desk" in utterances[0].text
    assert transcript.config.speakers_expected == 2
    words = transcript.words
    assert words and all(isinstance(w.start, int) and isinstance(w.end, int) for w in words)
    assert all(0 <= w.start <= w.end <= 56_300 for w in words)
    assert words[-1].end > 45_000  # milliseconds, not seconds
    assert {w.speaker for w in words} == {"A", "B"}
    assert all(0 < w.confidence <= 1 for w in words) and len({w.confidence for w in words}) > 5
    assert transcript.confidence is not None and 0.5 < transcript.confidence < 1
    assert sorted(w.start for u in utterances for w in u.words) == [w.start for w in words]

    cues = list(srt.parse(transcript.export_subtitles_srt(chars_per_caption=32)))
    assert len(cues) > 10 and all(len(c.content) <= 32 for c in cues)
    assert not any("speaker" in c.content for c in cues)
    assert cues[0].start.total_seconds() < 5 and cues[-1].end.total_seconds() > 45
    assert transcript.export_subtitles_vtt().startswith("WEBVTT")

    # AssemblyAI's webhook body, with the custom header and a5s's signature
    deadline = time.monotonic() + 60
    while not _Hooks.hits and time.monotonic() < deadline:
        time.sleep(0.2)
    [(headers, body)] = _Hooks.hits
    assert json.loads(body) == {"transcript_id": transcript.id, "status": "completed"}
    assert headers["x-hook"] == "open-sesame"
    verify(secret, headers, body)

    # the same job, ledger and queue as /v1
    with stack.client(key) as c:
        v1 = c.get(f"/v1/transcripts/{transcript.id}").json()
        assert v1["status"] == "completed" and v1["speakers"] and len(v1["speakers"]) == 2
        usage = c.get("/v1/usage", params={"days": 1}).json()
        assert usage["totals"]["a5s-async-v1"]["completed"] == 1
    again = aai.Transcript.get_by_id(transcript.id)
    assert again.webhook_status_code == 200 and again.webhook_auth
    listed = aai.Transcriber().list_transcripts()
    assert [t.id for t in listed.transcripts] == [transcript.id]
    assert listed.transcripts[0].status == aai.TranscriptStatus.completed

    deleted = aai.Transcript.delete_by_id(transcript.id)
    assert deleted.id == transcript.id
    with pytest.raises(aai.types.TranscriptError) as failed:
        aai.Transcript.get_by_id(transcript.id)
    assert failed.value.status_code == 404


def test_an_audio_url_is_fetched_and_speakers_stay_off(eval_server: EvalServer,
                                                      account: tuple[str, str, str]) -> None:
    url = eval_server.url("real/pocketsphinx/goforward.wav")
    transcript = aai.Transcriber().transcribe(url)
    assert transcript.status == aai.TranscriptStatus.completed, transcript.error
    assert transcript.audio_url == url and transcript.words
    assert transcript.utterances is None and {w.speaker for w in transcript.words} == {None}


def test_broken_audio_is_the_sdks_error_status(account: tuple[str, str, str]) -> None:
    transcript = aai.Transcriber().transcribe(str(BROKEN))
    assert transcript.status == aai.TranscriptStatus.error
    assert transcript.error and transcript.text is None and transcript.words is None


def test_refusals_reach_the_sdk_as_its_errors(stack: Stack,
                                              account: tuple[str, str, str]) -> None:
    transcriber = aai.Transcriber()
    url = transcriber.upload_file(str(SHORT))
    refused = {
        "auto_chapters": aai.TranscriptionConfig(auto_chapters=True),
        "speaker_options": aai.TranscriptionConfig(
            speaker_options=aai.SpeakerOptions(max_speakers_expected=3)),
        "speakers_expected": aai.TranscriptionConfig(speakers_expected=2),
        "speech_model": aai.TranscriptionConfig(speech_model=aai.SpeechModel.best),
        "language_code": aai.TranscriptionConfig(language_code="de"),
    }
    for name, config in refused.items():
        with pytest.raises(aai.types.TranscriptError) as error:
            transcriber.transcribe(url, config=config)
        assert error.value.status_code == 400 and name in str(error.value), str(error.value)
    assert "does not run AssemblyAI's audio intelligence" in _error(
        transcriber, aai.TranscriptionConfig(auto_chapters=True))

    with pytest.raises(aai.types.TranscriptError) as error:
        aai.Transcriber(client=aai.Client(api_key="not-a-key")).upload_file(str(SHORT))
    assert error.value.status_code == 401

    # refusals the SDK cannot send: the same {"error": "..."} shape
    headers = {"Authorization": account[1]}
    for method, path, body in (("PATCH", "/v2/transcript", None),
                               ("GET", "/v2/transcript/tr_x/sentences", None),
                               ("POST", "/v2/transcript", b"{not json"),
                               ("GET", "/v2/transcript?after_id=tr_x", None)):
        resp = httpx.request(method, stack.url(path), headers=headers, content=body)
        assert resp.status_code in (400, 404, 405), (path, resp.text)
        assert isinstance(resp.json()["error"], str), (path, resp.text)
    doc = httpx.get(stack.url("/v1/openapi.json")).json()
    assert not any(p.startswith("/v2") for p in doc["paths"])


def _error(transcriber: aai.Transcriber, config: aai.TranscriptionConfig) -> str:
    try:
        transcriber.transcribe("https://example.com/a.wav", config=config)
    except aai.types.TranscriptError as exc:
        return str(exc)
    raise AssertionError("the request was not refused")


def test_the_accounts_limits_apply(stack: Stack, account: tuple[str, str, str]) -> None:
    """The same admission as /v1: an exhausted usage limit and the create rate limit."""
    _, spent = stack.new_account(usage_limit_seconds=0)
    transcriber = aai.Transcriber(client=aai.Client(api_key=spent))
    url = transcriber.upload_file(str(SHORT))
    with pytest.raises(aai.types.TranscriptError) as error:
        transcriber.transcribe(url)
    assert error.value.status_code == 403 and "usage limit" in str(error.value).lower()

    _, hasty = stack.new_account(max_requests_per_minute=1)
    transcriber = aai.Transcriber(client=aai.Client(api_key=hasty))
    first = transcriber.submit(transcriber.upload_file(str(SHORT)))
    assert first.status == aai.TranscriptStatus.queued
    with pytest.raises(aai.types.TranscriptError) as error:
        transcriber.submit(transcriber.upload_file(str(SHORT)))
    assert error.value.status_code == 429
    assert transcriber.upload_file(str(SHORT)).startswith(stack.url("/v2/upload/"))
