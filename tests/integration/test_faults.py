"""Faults injected into a real embedded stack: nothing accepted is lost or counted twice.

The stack here is this module's own (``a5s up`` in a fresh data directory), so its
processes can be killed without disturbing other tests:

- the service process (gateway and pipeline) is SIGKILLed once in each batch stage of
  one job, the moment found from the job's files under ``objects/jobs/<id>/``;
- the broker (noida-db) and Valkey are SIGKILLed, and Valkey is also frozen
  (SIGSTOP) to stand for a backing service that hangs; ``a5s up`` restarts whatever
  died in place (``run/<name>.pid`` names the processes).

Every job submitted here is followed to the end by the last test: one terminal state
each, every valid clip completed with its words, usage counted once in the ledger and
in the usage report, and one webhook event id per job.
"""

from __future__ import annotations

import http.server
import json
import os
import signal
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from ops.stack import EVAL, Stack, free_port

pytestmark = [pytest.mark.stack, pytest.mark.timeout(900)]

MANIFEST = {item["path"]: item for item in
            json.loads((EVAL / "manifest.json").read_text())["items"]}
LONG_CLIP = "real/asterisk_16k/demo-congrats.wav"  # 30 s: every stage lasts long enough
SHORT_CLIPS = ("real/whisper/jfk.flac", "real/asterisk_16k/vm-leavemsg.wav",
               "real/speechbrain/spk1_snt1.wav")
SLOW_DOWNLOAD_S = 3.0
"""The long clip is served over this many seconds, which holds its job in ``decode``."""
PROMPT_S = 6.0
"""An API answer while a backing service is down or frozen comes within this (Redis's
socket timeout is 5 s)."""


# --- loopback helpers -------------------------------------------------------------------------

@dataclass
class Loopback:
    """Serves ``../shared/eval`` (``?slow=S`` spreads a file over S seconds) and receives
    webhooks (every POST recorded with its ``webhook-id``)."""

    port: int = 0
    downloading: dict[str, int] = field(default_factory=dict)
    hooks: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def audio(self, path: str, slow: float = 0.0) -> str:
        query = f"?slow={slow}" if slow else ""
        return f"http://127.0.0.1:{self.port}/{path}{query}"

    def hook(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/hook/{name}"

    def busy(self, path: str) -> bool:
        with self.lock:
            return self.downloading.get(path, 0) > 0

    def deliveries(self) -> list[tuple[str, str, dict[str, Any]]]:
        with self.lock:
            return list(self.hooks)


def _handler(lb: Loopback) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # noqa: N802 - http.server's spelling
            url = urllib.parse.urlsplit(self.path)
            file = EVAL / url.path.lstrip("/")
            if not file.is_file():
                self.send_error(404)
                return
            data = file.read_bytes()
            slow = float(urllib.parse.parse_qs(url.query).get("slow", ["0"])[0])
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            key = url.path.lstrip("/")
            with lb.lock:
                lb.downloading[key] = lb.downloading.get(key, 0) + 1
            try:
                parts = 30 if slow else 1
                step = -(-len(data) // parts)
                for i in range(0, len(data), step):
                    self.wfile.write(data[i:i + step])
                    if slow:
                        time.sleep(slow / parts)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the downloading process was killed: that is the point
            finally:
                with lb.lock:
                    lb.downloading[key] -= 1

        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with lb.lock:
                lb.hooks.append((self.path, self.headers.get("webhook-id", ""),
                                 json.loads(body or b"{}")))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture(scope="module")
def loopback() -> Iterator[Loopback]:
    lb = Loopback(port=free_port())
    server = http.server.ThreadingHTTPServer(("127.0.0.1", lb.port), _handler(lb))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield lb
    server.shutdown()


@pytest.fixture(scope="module")
def fstack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    env = {"A5S_WEBHOOKS__RETRY_SCHEDULE_S": "[1, 2, 2, 5]", "A5S_WEBHOOKS__TIMEOUT_S": "2",
           "A5S_WEBHOOKS__ALLOW_LOOPBACK": "true",
           # the smallest model: these tests are about delivery, not about words
           "A5S_MODELS__WHISPER": "tiny.en", "A5S_MODELS__BEAM_SIZE": "1",
           # six kills within seconds of each start would wait 90 s in all at the default
           # crash-loop backoff (tests/unit/test_ops_restart.py checks that schedule)
           "A5S_RESTART_DELAY_MAX_S": "2"}
    s = Stack(tmp_path_factory.mktemp("faults") / "data", env=env)
    s.data_dir.mkdir(parents=True)
    s.start()
    yield s
    s.stop()


@dataclass
class Jobs:
    """Every job this module submitted: transcript id -> clip path."""

    key: str
    clips: dict[str, str] = field(default_factory=dict)
    faults: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def jobs(fstack: Stack) -> Jobs:
    return Jobs(key=fstack.new_account()[1])


def submit(stack: Stack, jobs: Jobs, lb: Loopback, clip: str, slow: float = 0.0) -> str:
    with stack.client(jobs.key) as client:
        resp = client.post("/v1/transcripts", json={
            "audio_url": lb.audio(clip, slow), "webhook_url": lb.hook(clip.replace("/", "_")),
            "metadata": {"clip": clip}})
    assert resp.status_code == 201, resp.text
    tid = resp.json()["id"]
    jobs.clips[tid] = clip
    return tid


def pid_of(stack: Stack, name: str) -> int:
    return int((stack.data_dir / "run" / f"{name}.pid").read_text())


def restarted(stack: Stack, name: str, old: int) -> bool:
    """``name`` runs under a new pid (its pidfile may be mid-write)."""
    try:
        return pid_of(stack, name) != old
    except (FileNotFoundError, ValueError):
        return False


def wait_for(check: Any, timeout_s: float, what: str, every_s: float = 0.01) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(every_s)
    raise TimeoutError(f"{what} did not happen within {timeout_s} s")


# --- the service killed in every stage --------------------------------------------------------

STAGE_FILES = ("duration.json", "chunks.json", "words.json", "result.json")
"""What each batch stage leaves behind: decode, chunk (VAD), transcribe, diarize."""


def stage_of(job_dir: Path, lb: Loopback, clip: str) -> str | None:
    """The stage a job is in, judged from its files (and its download)."""
    try:
        names = {p.name for p in job_dir.iterdir()}
    except FileNotFoundError:
        return None
    if "duration.json" not in names:
        return "decode" if lb.busy(clip) or any(n.startswith(".tmp") for n in names) else None
    for stage, output in zip(("chunk", "transcribe", "diarize", "finalize"), STAGE_FILES[1:]
                             + ("",)):
        if output and output not in names:
            return stage
    return "finalize"


def test_service_killed_in_every_batch_stage(fstack: Stack, jobs: Jobs,
                                              loopback: Loopback) -> None:
    """SIGKILL in decode, chunk, transcribe, diarize and finalize of one job; short jobs
    submitted alongside are caught wherever they are."""
    tid = submit(fstack, jobs, loopback, LONG_CLIP, slow=SLOW_DOWNLOAD_S)
    for clip in SHORT_CLIPS:
        submit(fstack, jobs, loopback, clip)
    job_dir = fstack.data_dir / "objects" / "jobs" / tid
    for stage in ("decode", "chunk", "transcribe", "diarize", "finalize"):
        # Stages that run on after a restart are replayed: wait for this stage's moment.
        wait_for(lambda: stage_of(job_dir, loopback, LONG_CLIP) == stage, 600,
                 f"{tid} reaching {stage}", every_s=0.005)
        fstack.kill_service()
        jobs.faults.append(f"service SIGKILL in {stage}")
        fstack.wait_ready()
    with fstack.client(jobs.key) as client:
        body = fstack.wait_transcript(client, tid, timeout_s=600)
    assert body["status"] == "completed", body.get("error")
    assert body["audio_duration"] == pytest.approx(MANIFEST[LONG_CLIP]["duration"], abs=0.1)


def test_broker_killed_then_restarted_with_the_service(fstack: Stack, jobs: Jobs,
                                                      loopback: Loopback) -> None:
    """The broker is restarted in place (its log and offsets are on disk) and the service
    with it: a running Faust worker that rejoins its group after a broker restart was seen
    to drop records fetched around the rebalance; a fresh process resumes cleanly."""
    service = fstack.service_pid()
    tids = [submit(fstack, jobs, loopback, clip) for clip in SHORT_CLIPS[:2]]
    with fstack.client(jobs.key) as client:
        wait_for(lambda: client.get(f"/v1/transcripts/{tids[0]}").json()["status"] ==
                 "processing", 120, "the first job processing", every_s=0.05)
    broker = pid_of(fstack, "broker")
    os.kill(broker, signal.SIGKILL)
    jobs.faults.append("broker SIGKILL")
    wait_for(lambda: fstack.service_pid() not in (None, service), 60, "a new service",
             every_s=0.2)
    fstack.wait_ready()
    assert pid_of(fstack, "broker") != broker
    tids.append(submit(fstack, jobs, loopback, SHORT_CLIPS[2]))
    with fstack.client(jobs.key) as client:
        for tid in tids:
            body = fstack.wait_transcript(client, tid, timeout_s=300)
            assert body["status"] == "completed", body.get("error")


def _prompt_answers(stack: Stack, key: str, seconds: float) -> list[tuple[int, float, Any]]:
    """GET /v1/account for ``seconds``: (status, latency, body) of every answer."""
    answers = []
    deadline = time.monotonic() + seconds
    with httpx.Client(base_url=stack.url(""), headers={"Authorization": f"Bearer {key}"},
                      timeout=PROMPT_S * 3) as client:
        while time.monotonic() < deadline:
            started = time.monotonic()
            resp = client.get("/v1/account")
            answers.append((resp.status_code, time.monotonic() - started, resp.json()))
            time.sleep(0.05)
    return answers


def _check_envelopes(answers: list[tuple[int, float, Any]]) -> None:
    for status, took, body in answers:
        assert took < PROMPT_S, f"an answer took {took:.1f} s"
        assert status in (200, 502, 504), (status, body)
        if status != 200:
            err = body["error"]
            assert err["code"] == {502: "upstream_unavailable", 504: "upstream_timeout"}[status]
            assert err["type"] == "api_error" and err["request_id"] is None


def test_redis_killed_then_restarted_and_api_answers_promptly(
        fstack: Stack, jobs: Jobs, loopback: Loopback) -> None:
    """Valkey stays down for 3 s: ``a5s up`` is paused meanwhile, since it restarts a dead
    component within its 0.5 s look, which a loaded machine's first request can miss."""
    tid = submit(fstack, jobs, loopback, SHORT_CLIPS[0])
    redis_pid = pid_of(fstack, "redis")
    assert fstack.proc is not None
    os.kill(fstack.proc.pid, signal.SIGSTOP)
    try:
        os.kill(redis_pid, signal.SIGKILL)
        jobs.faults.append("redis SIGKILL")
        answers = _prompt_answers(fstack, jobs.key, 3.0)
    finally:
        os.kill(fstack.proc.pid, signal.SIGCONT)
    _check_envelopes(answers)
    assert any(status == 502 for status, _, _ in answers), "Redis down went unnoticed"
    wait_for(lambda: restarted(fstack, "redis", redis_pid), 30, "Valkey restarted",
             every_s=0.1)
    with fstack.client(jobs.key) as client:
        wait_for(lambda: client.get("/v1/account").status_code == 200, 30,
                 "the API recovering", every_s=0.2)
        assert fstack.wait_transcript(client, tid, timeout_s=300)["status"] == "completed"


def test_redis_frozen_gives_504_promptly_then_recovers(fstack: Stack, jobs: Jobs,
                                                      loopback: Loopback) -> None:
    tid = submit(fstack, jobs, loopback, SHORT_CLIPS[1])
    redis_pid = pid_of(fstack, "redis")
    os.kill(redis_pid, signal.SIGSTOP)
    jobs.faults.append("redis SIGSTOP 8 s")
    try:
        answers = _prompt_answers(fstack, jobs.key, 8.0)
    finally:
        os.kill(redis_pid, signal.SIGCONT)
    _check_envelopes(answers)
    assert any(status == 504 for status, _, _ in answers), answers[:3]
    with fstack.client(jobs.key) as client:
        wait_for(lambda: client.get("/v1/account").status_code == 200, 30,
                 "the API recovering", every_s=0.2)
        assert fstack.wait_transcript(client, tid, timeout_s=300)["status"] == "completed"


# --- the books after every fault --------------------------------------------------------------

def test_every_job_ended_once_counted_once_and_notified_once(
        fstack: Stack, jobs: Jobs, loopback: Loopback) -> None:
    assert jobs.clips and jobs.faults
    with fstack.client(jobs.key) as client:
        done = {tid: fstack.wait_transcript(client, tid, timeout_s=300) for tid in jobs.clips}
        for tid, body in done.items():
            clip = jobs.clips[tid]
            assert body["status"] == "completed", (clip, body.get("error"))
            assert body["audio_duration"] == pytest.approx(MANIFEST[clip]["duration"], abs=0.1)
            assert body["text"] and body["words"], (clip, "the transcript was lost")
        listed = client.get("/v1/transcripts", params={"limit": 100}).json()["data"]
        assert sorted(t["id"] for t in listed) == sorted(jobs.clips), "a job is missing or twice"
        total = sum(b["audio_duration"] for b in done.values())
        limit = fstack.wait_settled(client, total)
        assert limit["used_seconds"] == pytest.approx(total, abs=1e-3), (limit, total)
        assert limit["reserved_seconds"] == 0, limit
        totals = client.get("/v1/usage").json()["totals"]["a5s-async-v1"]
        assert totals["completed"] == len(done) and totals["failed"] == 0, totals
        assert totals["audio_seconds"] == pytest.approx(total, abs=0.01)
        time.sleep(3)  # a replayed outcome would move something now
        again = client.get("/v1/account").json()["usage_limit"]
        assert again["used_seconds"] == pytest.approx(total, abs=1e-3)
        for tid, body in done.items():
            assert client.get(f"/v1/transcripts/{tid}").json()["completed_at"] == \
                body["completed_at"]

    def all_notified() -> bool:
        return {b.get("id") for _, _, b in loopback.deliveries()} >= set(done)

    wait_for(all_notified, 60, "every webhook", every_s=0.2)
    events: dict[str, set[str]] = {}
    for _, webhook_id, body in loopback.deliveries():
        assert body["event"] == "transcript.completed" and set(body) == {
            "event", "id", "status", "metadata"}
        events.setdefault(body["id"], set()).add(webhook_id)
    assert set(events) == set(done)
    assert all(len(ids) == 1 for ids in events.values()), events
    print(f"\nfaults: {len(jobs.faults)} ({'; '.join(jobs.faults)}); jobs: {len(done)}; "
          f"webhook deliveries: {len(loopback.deliveries())} for {len(events)} events")

