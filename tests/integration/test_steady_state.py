"""What the service holds open does not grow with the jobs it runs (docs/operations.md,
*Over days*): a descriptor kept by each job (a socket to a peer, a file of the job, a
thread's own files) shows as dozens more after fifty jobs. Counts, not timings."""

from __future__ import annotations

import contextlib
import http.server
import threading
import time
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest

from ops.procstat import open_fds
from ops.stack import EVAL, REPO, EvalServer, Stack

pytestmark = pytest.mark.stack

PROMPTS = ("real/asterisk_16k/added.wav", "real/asterisk_16k/agent-loginok.wav",
           "real/asterisk_16k/agent-loggedoff.wav", "real/asterisk_16k/agent-newlocation.wav")
WARM_UP = 10
JOBS = 40
SLACK = 10
"""Descriptors that may come and go with the moment (a pooled connection opened or closed)."""


@contextlib.contextmanager
def receiver() -> Iterator[tuple[str, Counter[str]]]:
    """A webhook receiver on loopback that answers 200: its URL, and the deliveries' count."""
    seen: Counter[str] = Counter()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            seen["hook"] += 1
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/hook", seen
    finally:
        httpd.shutdown()


def run_jobs(stack: Stack, client: httpx.Client, server: EvalServer, hook: str,
             n: int, first: int) -> None:
    """``n`` jobs of short prompts: by URL, uploaded, and with a webhook, in turn; each ends
    completed."""
    ids = []
    for k in range(first, first + n):
        path = PROMPTS[k % len(PROMPTS)]
        body: dict[str, object] = {"audio_url": server.url(path) + f"?n={k}"}
        if k % 3 == 1:
            body["webhook_url"] = hook
        elif k % 3 == 2:
            upload = client.post("/v1/files", content=(EVAL / path).read_bytes())
            assert upload.status_code == 201, upload.text
            body = {"file_id": upload.json()["id"]}
        resp = client.post("/v1/transcripts", json=body)
        assert resp.status_code == 201, resp.text
        ids.append(resp.json()["id"])
    for tid in ids:
        assert stack.wait_transcript(client, tid)["status"] == "completed"


def quiet_fds(stack: Stack, ports: dict[int, str]) -> Counter[str]:
    """The service's descriptors at their fewest over a few looks, the jobs having ended (a
    request or a webhook in flight holds a socket for a moment)."""
    pid = stack.service_pid()
    assert pid is not None
    looks = []
    for _ in range(6):
        fds = open_fds(pid, ports, {str(stack.data_dir): "<data>", str(REPO): "<repo>"})
        assert fds is not None
        looks.append(fds)
        time.sleep(0.5)
    return min(looks, key=lambda c: sum(c.values()))


def test_fifty_jobs_leave_no_descriptor_behind(stack: Stack, eval_server: EvalServer) -> None:
    _, key = stack.new_account(max_requests_per_minute=10_000)
    ports = {stack.port: "the API", stack.console_port: "the console",
             int(stack.env["A5S_EMBEDDED__KAFKA"]): "the broker",
             int(stack.env["A5S_EMBEDDED__REDIS"]): "Valkey", eval_server.port: "the eval server"}
    with receiver() as (hook, seen), stack.client(key) as client:
        run_jobs(stack, client, eval_server, hook, WARM_UP, 0)  # pools and caches fill
        before = quiet_fds(stack, ports)
        run_jobs(stack, client, eval_server, hook, JOBS, WARM_UP)
        after = quiet_fds(stack, ports)
        deadline = time.monotonic() + 30  # the last webhooks: at least once each
        while seen["hook"] < (WARM_UP + JOBS) // 3 and time.monotonic() < deadline:
            time.sleep(0.5)
    grew = after.copy()
    grew.subtract(before)
    changed = {k: v for k, v in grew.items() if v}
    assert sum(after.values()) - sum(before.values()) <= SLACK, changed
    assert seen["hook"] >= (WARM_UP + JOBS) // 3, seen
