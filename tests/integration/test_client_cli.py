"""The Python client and the ``a5s transcribe`` / ``a5s stream`` commands against the stack."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import httpx
import pytest

from a5s import (AsyncClient, AuthenticationError, BadRequestError, Client, NotFoundError,
                 RateLimitError, TranscriptFailed)
from schemas.api import Transcript

from ops.stack import EVAL, REPO, Stack, free_port

pytestmark = pytest.mark.stack

JFK = EVAL / "real" / "whisper" / "jfk.flac"
SHORT = EVAL / "real" / "pocketsphinx" / "goforward.wav"  # 2.8 s


@pytest.fixture(scope="module")
def key(stack: Stack) -> str:
    return stack.new_account()[1]


@pytest.fixture(scope="module")
def client(stack: Stack, key: str):
    with Client(key, base_url=stack.url(""), poll_interval=0.3) as c:
        yield c


@pytest.fixture(scope="module")
def done(client: Client) -> Transcript:
    stages: list[str] = []
    transcript = client.transcribe(JFK, timeout=240, metadata={"ref": "client"},
                                   on_progress=lambda stage, _: stages.append(stage))
    assert stages[:3] == ["uploading", "uploaded", "queued"] and stages[-1] == "completed"
    assert len(stages) == len(set(stages))  # each stage reported once
    return transcript


def test_transcribe_upload_and_read_back(client: Client, done: Transcript) -> None:
    assert done.status == "completed" and "ask not what your country" in (done.text or "")
    assert done.words and done.utterances and done.speakers
    assert done.metadata == {"ref": "client"}
    again = client.get_transcript(done.id)
    assert again.text == done.text
    srt = client.subtitles(done.id, "srt", chars_per_caption=20)
    assert srt.startswith("1\n00:00:") and "[speaker_1]" in srt
    assert client.subtitles(done.id, "vtt").startswith("WEBVTT")
    assert client.account().usage_limit.used_seconds >= 10
    usage = client.usage(days=1)
    assert usage.totals["a5s-async-v1"].completed >= 1


def test_list_pages_and_delete(client: Client, done: Transcript, eval_server) -> None:
    queued = client.transcribe(eval_server.url("real/whisper/jfk.flac"), wait=False)
    assert queued.status == "queued" and queued.audio_url
    ids = [t.id for t in client.list_transcripts(limit=1)]
    assert ids[:2] == [queued.id, done.id]  # newest first, one item per page
    deleted = client.delete_transcript(queued.id)
    assert deleted.deleted
    with pytest.raises(NotFoundError) as err:
        client.get_transcript(queued.id)
    assert err.value.code == "not_found" and err.value.request_id.startswith("req_")


def test_typed_errors(stack: Stack, client: Client) -> None:
    with pytest.raises(BadRequestError) as err:
        client.create_transcript(audio_url="https://example.com/a.mp3", language_code="fr")
    assert err.value.code == "unsupported_language" and err.value.param == "language_code"
    with Client("a5s_sk_nope", base_url=stack.url("")) as bad, \
            pytest.raises(AuthenticationError) as auth:
        bad.account()
    assert auth.value.status_code == 401 and auth.value.code == "unauthorized"
    with pytest.raises(TranscriptFailed) as failed:
        client.transcribe(b"not audio at all", timeout=120)
    assert failed.value.code == "invalid_audio"


def test_retries_honour_retry_after() -> None:
    """A scripted server (httpx's MockTransport) stands in for the stack here: the client's
    retry loop needs 429s with a chosen ``Retry-After`` in a set order, which the real
    service gives only under a load the test cannot time."""
    calls: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        if len(calls) < 3:
            return httpx.Response(429, headers={"Retry-After": "0"}, json={"error": {
                "type": "rate_limit_error", "code": "queue_full", "message": "wait",
                "param": None, "request_id": "req_x"}})
        return httpx.Response(200, json={"object": "list", "data": []})

    with Client("k", base_url="http://t", transport=httpx.MockTransport(handler)) as c:
        assert c.models().data == []
    assert len(calls) == 3
    with Client("k", base_url="http://t", max_retries=0,
                transport=httpx.MockTransport(lambda r: httpx.Response(
                    429, headers={"Retry-After": "7"}, json={"error": {
                        "type": "rate_limit_error", "code": "rate_limited", "message": "m",
                        "param": None, "request_id": "req_y"}}))) as c, \
            pytest.raises(RateLimitError) as err:
        c.models()
    assert err.value.retry_after == 7 and err.value.request_id == "req_y"


async def test_async_client(stack: Stack, key: str, done: Transcript) -> None:
    async with AsyncClient(key, base_url=stack.url("")) as c:
        got = await c.get_transcript(done.id)
        assert got.text == done.text
        seen = [t.id async for t in c.list_transcripts(status="completed", limit=100)]
        assert done.id in seen


def _cli(stack: Stack, key: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"A5S_API_KEY": key, "A5S_URL": stack.url(""), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "ops.cli", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=240)


def test_cli_transcribe(stack: Stack, key: str) -> None:
    out = _cli(stack, key, "transcribe", str(SHORT), "--srt")
    assert out.returncode == 0, out.stderr
    assert "uploading" in out.stderr and "queued" in out.stderr and "completed" in out.stderr
    assert out.stdout.startswith("1\n00:00:") and "[speaker_1]" in out.stdout
    bad = _cli(stack, "a5s_sk_wrong", "transcribe", str(SHORT), "--json")
    assert bad.returncode == 1 and "unauthorized" in bad.stderr and "req_" in bad.stderr


def test_cli_stream(stack: Stack, key: str) -> None:
    out = _cli(stack, key, "stream", str(SHORT))
    assert out.returncode == 0, out.stderr
    assert "forward" in out.stdout.lower() and "finished" in out.stderr



def _one_line_error(out: subprocess.CompletedProcess[str], *expected: str) -> str:
    """A mistake: exit 1, no traceback, one error line (after any progress) saying what."""
    assert out.returncode == 1, (out.returncode, out.stdout, out.stderr)
    assert "Traceback" not in out.stdout + out.stderr and "never retrieved" not in out.stderr
    lines = [ln for ln in out.stderr.strip().splitlines() if not ln.startswith("a5s: ")]
    assert len(lines) == 1 and lines[0].startswith("Error: "), out.stderr
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]


def test_cli_mistakes_are_one_line(stack: Stack, key: str, tmp_path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("call the bank on monday\n")
    locked = tmp_path / "locked.wav"
    locked.write_bytes(JFK.read_bytes())
    locked.chmod(0)
    _one_line_error(_cli(stack, key, "transcribe", "nope.wav"), "nope.wav", "no such file")
    _one_line_error(_cli(stack, key, "transcribe", str(notes)), "notes.txt",
                    "not an audio or video file")
    _one_line_error(_cli(stack, key, "transcribe", str(tmp_path)), "not a file")
    if os.geteuid() != 0:  # root reads any file
        _one_line_error(_cli(stack, key, "transcribe", str(locked)), "permission denied")
    started = time.monotonic()
    _one_line_error(_cli(stack, key, "stream", str(notes)), "not an audio or video file")
    _one_line_error(_cli(stack, key, "stream", "nope.wav"), "no such file")
    assert time.monotonic() - started < 30  # not the 45 s idle timeout


def _as_up_was_given(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI with ``env`` alone (no ``A5S_URL``): what a user has after starting ``a5s up``."""
    return subprocess.run([sys.executable, "-m", "ops.cli", *args], cwd=REPO,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), **env},
                          capture_output=True, text=True, timeout=240)


def test_cli_finds_the_service_from_the_settings_a5s_up_was_given(stack: Stack, key: str,
                                                                 tmp_path) -> None:
    """The stack runs on non-default ports. Given the variables its ``a5s up`` was given, or
    only its data directory (the ports then come from ``run/up.json``), transcribe, stream,
    admin and sql all reach it."""
    assert "A5S_URL" not in stack.env and stack.port != 8000 and stack.console_port != 8001
    given = {**stack.env, "A5S_API_KEY": key}
    only_dir = {"A5S_DATA_DIR": str(stack.data_dir), "A5S_API_KEY": key}

    srt = tmp_path / "short.srt"
    out = _as_up_was_given(given, "transcribe", str(SHORT), "--output", str(srt))
    assert out.returncode == 0, out.stderr
    assert out.stdout == "" and f"wrote {srt}" in out.stderr
    assert srt.read_text().startswith("1\n00:00:") and "[speaker_1]" in srt.read_text()
    as_json = tmp_path / "short.json"
    out = _as_up_was_given(only_dir, "transcribe", str(SHORT), "-o", str(as_json))
    assert out.returncode == 0, out.stderr
    done = Transcript.model_validate_json(as_json.read_text())
    assert done.status == "completed" and "forward" in (done.text or "")

    for env in (given, only_dir):
        out = _as_up_was_given(env, "stream", str(SHORT))
        assert out.returncode == 0, out.stderr
        assert "forward" in out.stdout.lower() and "finished" in out.stderr

    made = _as_up_was_given(given, "admin", "create-account", "--email",
                            f"cli{time.time_ns()}@example.com", "--no-key")
    assert made.returncode == 0, made.stderr
    account = json.loads(made.stdout)["account"]["id"]
    shown = _as_up_was_given(only_dir, "admin", "show-account", account)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["account"]["id"] == account

    for env in (given, only_dir):
        out = _as_up_was_given(env, "sql", "--json", "SELECT uniqExact(id) AS n FROM "
                               f"{{db}}.transcripts WHERE id = '{done.id}'")
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout) == {"n": 1}  # row versions merge later: distinct ids


def test_cli_refuses_conflicting_formats(stack: Stack, key: str, tmp_path) -> None:
    """Refused in one line before anything is sent: no upload, no file written."""
    given = {**stack.env, "A5S_API_KEY": key}
    vtt = tmp_path / "talk.vtt"
    for args, expected in ((["--srt", "--vtt"], "--srt and --vtt conflict"),
                           (["--srt", "--vtt", "--json"], "--srt, --vtt and --json conflict"),
                           (["--srt", "--output", str(vtt)], f"--srt conflicts with --output {vtt}"),
                           (["--output", str(tmp_path / "no" / "t.srt")], "no such directory")):
        out = _as_up_was_given(given, "transcribe", str(SHORT), *args)
        line = _one_line_error(out, expected)
        assert "uploading" not in out.stderr, (line, out.stderr)
    assert not list(tmp_path.iterdir())


def test_cli_with_the_service_down(key: str) -> None:
    down = Stack(REPO)  # nothing listens on a fresh free port
    down.port = free_port()
    for args in (["transcribe", str(SHORT)], ["stream", str(SHORT)]):
        line = _one_line_error(_cli(down, key, *args))
        assert f"127.0.0.1:{down.port}" in line and "is a5s running" in line, line


def test_streaming_a_file_that_does_not_decode_fails_at_once(stack: Stack, key: str,
                                                             tmp_path) -> None:
    """The client library alone (no probe): the sender's failure ends the session at once,
    not at the service's 45 s idle timeout, and no task exception is left unretrieved."""
    from a5s import StreamError
    from a5s.realtime import stream

    notes = tmp_path / "notes.txt"
    notes.write_text("call the bank on monday\n")
    started = time.monotonic()
    with pytest.raises(StreamError) as caught:
        for _ in stream(notes, url=stack.ws_url, api_key=key):
            pass
    assert caught.value.code == "send_failed" and "notes.txt" in caught.value.message
    assert time.monotonic() - started < 15
