"""The batch pipeline end to end: real audio through the API, real models, real stores.

Every job goes in as a client's would (``POST /v1/transcripts`` with an
``audio_url`` served from ``../shared/eval`` on loopback) and is judged by what
the API returns: words (WER against the eval set's references), job errors
(spec section 7), scheduling (FIFO, five at a time), and the usage ledger
(``GET /v1/account``: completed audio counted exactly once, failures and
cancellations never).

WER is scored after lowercasing and removing punctuation on both sides, with
numbers 0-999 and "mr"/"mrs"/"dr"/"ok" spelled out (``evaluation.text``), since a
reference may say "mister" where the transcript says "mr".
"""

from __future__ import annotations

import http.server
import json
import threading
import time
import urllib.parse
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import jiwer
import pytest

from evaluation.text import normalized, plain_words
from ops.stack import EVAL, EvalServer, Stack, free_port

pytestmark = pytest.mark.stack

MANIFEST = {item["path"]: item for item in
            json.loads((EVAL / "manifest.json").read_text())["items"]}

REAL_CLIPS = (
    "real/whisper/jfk.flac",
    "real/pocketsphinx/librivox/sense_and_sensibility_01_austen_64kb-0870.wav",
    "real/pocketsphinx/librivox/sense_and_sensibility_01_austen_64kb-0890.wav",
    "real/pocketsphinx/librivox/sense_and_sensibility_01_austen_64kb-0920.wav",
    "real/speechbrain/LJ050-0131.wav",
    "real/speechbrain/spk1_snt1.wav",
    "real/deepspeech/LDC93S1.wav",
    "real/asterisk_8k/basic-pbx-ivr-main.wav",
    "real/asterisk_8k/privacy-prompt.wav",
    "real/asterisk_8k/queue-callswaiting.wav",
)
"""About 75 s of real speech from five sources, 8 kHz telephone audio included."""

CLEAN_MAX_WER = 0.15
CLEAN_MAX_ERRORS = 3
"""A clip passes with at most this many word errors even above ``CLEAN_MAX_WER``: on a
ten-word sentence one misheard word is 10 %. Whisper base itself (``bench.asr``) makes
3 errors on LJ050-0131 ("thereunder") and on TIMIT's LDC93S1, and the service must give
the same words as the bare model."""
OVERALL_MAX_WER = 0.08
"""Pooled over the clips above; whisper base scores about 6.5 % on this mix (the TIMIT
sentence and "waldo's" in the IVR prompt), the same as the bare model."""
DEGRADED_MAX_WER = 0.35
"""Bound for the bad/ items that must still be transcribed (distortion, speed, codecs)."""

MAX_JOBS_PER_ACCOUNT = 5
NO_SPEECH = ("silence_digital_10s.wav", "silence_noise_floor_-60dBFS_10s.wav",
             "pink_noise_only_10s.wav", "tone_1khz_5s.wav")


# --- helpers ----------------------------------------------------------------------------------

def wer(reference: str, hypothesis: str) -> float:
    ref = normalized(reference)
    return jiwer.wer(ref, normalized(hypothesis) or "<empty>") if ref else 0.0


def word_errors(reference: str, hypothesis: str) -> int:
    out = jiwer.process_words(normalized(reference), normalized(hypothesis) or "<empty>")
    return out.substitutions + out.deletions + out.insertions


def submit(client: httpx.Client, url: str) -> str:
    resp = client.post("/v1/transcripts", json={"audio_url": url})
    assert resp.status_code == 201, resp.text
    return resp.json()["id"]


def wait_all(stack: Stack, client: httpx.Client, ids: list[str],
             timeout_s: float) -> dict[str, dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    return {tid: stack.wait_transcript(client, tid, timeout_s=max(1.0, deadline - time.monotonic()))
            for tid in ids}


def usage(client: httpx.Client) -> dict[str, float]:
    resp = client.get("/v1/account")
    assert resp.status_code == 200, resp.text
    return resp.json()["usage_limit"]


def settled_usage(client: httpx.Client, used: float, timeout_s: float = 60.0) -> dict[str, float]:
    """The ledger once it shows ``used`` seconds and nothing reserved (or as it is at timeout)."""
    deadline = time.monotonic() + timeout_s
    while True:
        limit = usage(client)
        if (abs(limit["used_seconds"] - used) < 1e-3 and limit["reserved_seconds"] == 0) or \
                time.monotonic() > deadline:
            return limit
        time.sleep(0.5)


def at(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def wait_status(client: httpx.Client, tid: str, status: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if client.get(f"/v1/transcripts/{tid}").json().get("status") == status:
            return
        time.sleep(0.2)
    raise TimeoutError(f"{tid} never reached {status}")


def wait_reserved(client: httpx.Client, timeout_s: float = 120.0) -> None:
    """Until the account has a reservation: the running job's duration is known (decoded)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if usage(client)["reserved_seconds"] > 0:
            return
        time.sleep(0.2)
    raise TimeoutError("no usage was reserved")


def assert_result_shape(body: dict[str, Any]) -> None:
    words = body["words"]
    assert body["text"] == " ".join(w["text"] for w in words)
    assert all(w["start"] <= w["end"] for w in words)
    assert [w["start"] for w in words] == sorted(w["start"] for w in words)
    assert sum(len(u["words"]) for u in body["utterances"]) == len(words)


class _Redirector(http.server.BaseHTTPRequestHandler):
    """``GET /?to=URL`` answers 302 to URL: a loopback hop towards an address never allowed."""

    def do_GET(self) -> None:  # noqa: N802
        target = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)["to"][0]
        self.send_response(302)
        self.send_header("Location", target)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def redirector() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), _Redirector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


# --- real speech ------------------------------------------------------------------------------

def test_real_speech_is_transcribed_with_the_right_words(stack: Stack,
                                                         eval_server: EvalServer) -> None:
    _, key = stack.new_account()
    with stack.client(key) as client:
        ids = {path: submit(client, eval_server.url(path)) for path in REAL_CLIPS}
        done = wait_all(stack, client, list(ids.values()), timeout_s=900)
        refs, hyps, errors = [], [], []
        print()
        for path, tid in ids.items():
            body = done[tid]
            assert body["status"] == "completed", (path, body.get("error"))
            assert body["audio_duration"] == pytest.approx(MANIFEST[path]["duration"], abs=0.1)
            assert_result_shape(body)
            assert body["speakers"] and body["utterances"]
            ref = MANIFEST[path]["reference_text"]
            score = wer(ref, body["text"])
            plain = jiwer.wer(plain_words(ref), plain_words(body["text"]) or "<empty>")
            print(f"wer {score:6.1%} (plain {plain:6.1%})  {path}\n"
                  f"      ref: {plain_words(ref)}\n      hyp: {body['text']}")
            refs.append(normalized(ref))
            hyps.append(normalized(body["text"]))
            if score > CLEAN_MAX_WER and word_errors(ref, body["text"]) > CLEAN_MAX_ERRORS:
                errors.append(f"{path}: WER {score:.1%}")
        overall = jiwer.wer(refs, hyps)
        print(f"overall WER {overall:.2%} over {sum(len(r.split()) for r in refs)} words, "
              f"{sum(MANIFEST[p]['duration'] for p in REAL_CLIPS):.1f} s of audio")
        assert not errors, errors
        assert overall <= OVERALL_MAX_WER
        expected = sum(done[tid]["audio_duration"] for tid in ids.values())
        limit = settled_usage(client, expected)
        assert limit["used_seconds"] == pytest.approx(expected, abs=1e-3)
        assert limit["reserved_seconds"] == 0


# --- bad inputs -------------------------------------------------------------------------------

def _check_bad(path: str, body: dict[str, Any]) -> list[str]:
    """Problems with one bad/ item's outcome, judged by its ``expected_behaviour``."""
    item = MANIFEST[path]
    expected = item["expected_behaviour"]
    name = Path(path).name
    status, code = body["status"], (body.get("error") or {}).get("code")
    ref = item.get("reference_text") or ""
    if expected.startswith("error invalid_audio"):
        return [] if code == "invalid_audio" else [f"{path}: {status} {code}, want invalid_audio"]
    may_fail = "or error invalid_audio" in expected or expected.startswith("detect by content")
    if status == "error":
        return [] if may_fail and code == "invalid_audio" else [f"{path}: error {code}: "
                                                                f"{body['error']['message']}"]
    if status != "completed":
        return [f"{path}: {status}"]
    assert_result_shape(body)
    if name in NO_SPEECH:
        if body["text"] or body["words"] or body["utterances"]:
            return [f"{path}: text on audio without speech: {body['text']!r}"]
        return []
    if name in ("wav_header_says_48k.wav", "jfk_very_quiet_-45dB.wav") or \
            name.startswith("truncated"):
        return []  # no crash is all that is asked (the quiet clip may come back empty)
    score = wer(ref, body["text"])
    problems = [f"{path}: WER {score:.1%}: {body['text']!r}"] if score > DEGRADED_MAX_WER else []
    if name == "jfk_stereo_dual_mono.wav" and len(body["words"]) > len(ref.split()) + 2:
        problems.append(f"{path}: {len(body['words'])} words, duplicated channels?")
    if name == "jfk_with_30s_leading_silence.wav" and body["words"] and \
            body["words"][0]["start"] < 30.0:
        problems.append(f"{path}: first word at {body['words'][0]['start']} s")
    return problems


def test_bad_inputs_end_as_the_eval_set_expects(stack: Stack, eval_server: EvalServer) -> None:
    paths = sorted(p for p, item in MANIFEST.items() if item["kind"] == "bad")
    assert len(paths) >= 40
    groups = [paths[i:i + MAX_JOBS_PER_ACCOUNT] for i in range(0, len(paths),
                                                                 MAX_JOBS_PER_ACCOUNT)]
    accounts = []
    for group in groups:  # one account per five files: all of them run at once
        _, key = stack.new_account()
        client = stack.client(key)
        accounts.append((client, {path: submit(client, eval_server.url(path)) for path in group}))
    problems: list[str] = []
    print()
    try:
        for client, ids in accounts:
            done = wait_all(stack, client, list(ids.values()), timeout_s=1200)
            for path, tid in ids.items():
                body = done[tid]
                outcome = body["status"] if body["status"] == "completed" else \
                    f"error {body['error']['code']}"
                print(f"{outcome:22s} {path}: {(body.get('text') or '')[:60]!r}")
                problems += _check_bad(path, body)
            counted = sum(b["audio_duration"] for b in done.values() if b["status"] == "completed")
            limit = settled_usage(client, counted)
            if abs(limit["used_seconds"] - counted) > 1e-3 or limit["reserved_seconds"]:
                problems.append(f"ledger {limit} != {counted:.3f} s completed, 0 reserved")
    finally:
        for client, _ in accounts:
            client.close()
    assert not problems, "\n".join(problems)


# --- URL policy -------------------------------------------------------------------------------

def test_link_local_is_refused_even_through_a_redirect(stack: Stack, redirector: str) -> None:
    """This stack allows private and loopback URLs; cloud metadata stays out of reach."""
    _, key = stack.new_account()
    targets = ["http://169.254.169.254/latest/meta-data/", "http://[fe80::1]/x.wav",
               "http://0xa9fea9fe/latest/meta-data/"]
    with stack.client(key) as client:
        ids = [submit(client, redirector + "?" + urllib.parse.urlencode({"to": t}))
               for t in targets]
        ids.append(submit(client, "http://169.254.169.254/latest/meta-data/"))
        for tid, body in wait_all(stack, client, ids, timeout_s=300).items():
            assert body["status"] == "error", body
            assert body["error"]["code"] == "download_failed", body["error"]
        assert settled_usage(client, 0.0)["used_seconds"] == 0


def test_default_policy_refuses_private_and_loopback_urls(
        tmp_path: Path, eval_server: EvalServer, redirector: str) -> None:
    """A stack with the production default (no private audio URLs)."""
    stack = Stack(tmp_path / "data", env={"A5S_ALLOW_PRIVATE_AUDIO_URLS": "false"})
    stack.data_dir.mkdir(parents=True)
    stack.start()
    try:
        _, key = stack.new_account()
        with stack.client(key) as client:
            urls = [eval_server.url("real/whisper/jfk.flac"),  # loopback
                    f"http://localhost:{eval_server.port}/real/whisper/jfk.flac",
                    "http://10.0.0.1/audio.wav", "http://192.168.1.1/audio.wav",
                    redirector + "?to=http://10.0.0.1/audio.wav"]
            ids = []
            for url in urls:
                resp = client.post("/v1/transcripts", json={"audio_url": url})
                if resp.status_code == 400:  # refused up front is fine too
                    continue
                assert resp.status_code == 201, resp.text
                ids.append(resp.json()["id"])
            for body in wait_all(stack, client, ids, timeout_s=300).values():
                assert body["status"] == "error", body
                assert body["error"]["code"] == "download_failed", body["error"]
                assert "public" in body["error"]["message"]
            limit = settled_usage(client, 0.0)
            assert limit["used_seconds"] == 0 and limit["reserved_seconds"] == 0
    finally:
        stack.stop()


# --- scheduling and usage ---------------------------------------------------------------------

def test_six_jobs_run_five_at_a_time_first_in_first_out(stack: Stack,
                                                        eval_server: EvalServer) -> None:
    _, key = stack.new_account()  # default max_concurrent_jobs = 5
    paths = ["real/speechbrain/spk1_snt3.wav", "real/speechbrain/spk1_snt4.wav",
             "real/speechbrain/spk1_snt5.wav", "real/speechbrain/spk2_snt2.wav",
             "real/speechbrain/spk2_snt4.wav", "real/speechbrain/spk1_snt1.wav"]
    with stack.client(key) as client:
        ids = [submit(client, eval_server.url(p)) for p in paths]
        most = 0
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:  # one list call: a snapshot of all six
            listed = client.get("/v1/transcripts", params={"limit": 100}).json()["data"]
            statuses = [row["status"] for row in listed if row["id"] in ids]
            most = max(most, statuses.count("processing"))
            if all(s in ("completed", "error") for s in statuses):
                break
            time.sleep(0.2)
        done = wait_all(stack, client, ids, timeout_s=60)
        assert most <= MAX_JOBS_PER_ACCOUNT
        bodies = [done[t] for t in ids]
        assert all(b["status"] == "completed" for b in bodies), [b.get("error") for b in bodies]
        starts = [at(b["started_at"]) for b in bodies]
        assert starts == sorted(starts), "jobs started out of submission order"
        first_finish = min(at(b["completed_at"]) for b in bodies[:5])
        assert starts[5] >= first_finish, "the sixth job started before a slot was free"
        for a, b in zip(paths, bodies):
            assert word_errors(MANIFEST[a]["reference_text"], b["text"]) <= CLEAN_MAX_ERRORS, \
                (a, b["text"])


def test_usage_limit_reached_when_audio_exceeds_the_remaining_usage(
        stack: Stack, eval_server: EvalServer) -> None:
    _, key = stack.new_account(usage_limit_seconds=5)
    with stack.client(key) as client:
        tid = submit(client, eval_server.url("real/whisper/jfk.flac"))  # 11 s
        body = stack.wait_transcript(client, tid)
        assert body["status"] == "error"
        assert body["error"]["code"] == "usage_limit_reached"
        limit = settled_usage(client, 0.0)
        assert limit["used_seconds"] == 0 and limit["reserved_seconds"] == 0
        assert limit["remaining_seconds"] == 5


def test_canceling_a_processing_job_removes_it_and_counts_nothing(
        stack: Stack, eval_server: EvalServer) -> None:
    _, key = stack.new_account()
    with stack.client(key) as client:
        tid = submit(client, eval_server.url("synthetic/conv01_support_call.wav"))
        wait_status(client, tid, "processing")
        resp = client.delete(f"/v1/transcripts/{tid}")
        assert resp.status_code == 200, resp.text
        assert resp.json()["deleted"] is True
        assert resp.json()["error"]["code"] == "canceled"
        assert client.get(f"/v1/transcripts/{tid}").status_code == 404
        time.sleep(3)  # let any stage still holding the job reach its cancel check
        assert client.get(f"/v1/transcripts/{tid}").status_code == 404
        limit = settled_usage(client, 0.0)
        assert limit["used_seconds"] == 0 and limit["reserved_seconds"] == 0
        model = client.get("/v1/account").json()["models"]["a5s-async-v1"]
        assert model["jobs_processing"] == 0 and model["jobs_queued"] == 0


def test_a_job_survives_a_worker_killed_mid_job_and_is_counted_once(
        stack: Stack, eval_server: EvalServer) -> None:
    path = "synthetic/conv02_team_meeting.wav"
    _, key = stack.new_account()
    with stack.client(key) as client:
        tid = submit(client, eval_server.url(path))
        wait_status(client, tid, "processing")
        wait_reserved(client)  # decoded; recognition under way
        time.sleep(2)
        stack.restart_service()
        body = stack.wait_transcript(client, tid, timeout_s=900)
        assert body["status"] == "completed", body.get("error")
        assert body["audio_duration"] == pytest.approx(MANIFEST[path]["duration"], abs=0.1)
        score = wer(MANIFEST[path]["reference_text"], body["text"])
        print(f"\nwer {score:.1%} after a restart: {path}")
        assert score <= CLEAN_MAX_WER
        limit = settled_usage(client, body["audio_duration"])
        assert limit["used_seconds"] == pytest.approx(body["audio_duration"], abs=1e-3)
        assert limit["reserved_seconds"] == 0
        time.sleep(5)  # a replayed finish would show up now
        assert usage(client)["used_seconds"] == pytest.approx(body["audio_duration"], abs=1e-3)
