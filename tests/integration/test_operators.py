"""Operators on a live ``a5s up``: read-only SQL over ClickHouse's HTTP interface
(clickhouse-connect, curl-style requests, ``a5s sql``) and the ``/ops`` dashboard in real
headless Chromium, after real jobs (one completed with a webhook, one failed)."""

from __future__ import annotations

import http.server
import itertools
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.browser import browser, png_pixels  # noqa: F401 - the fixture, by import
from ops.stack import EVAL, REPO, EvalServer, Stack, free_port

pytestmark = pytest.mark.stack

QUERIES = sorted((REPO / "ops" / "queries").glob("*.sql"))
JFK = EVAL / "real" / "whisper" / "jfk.flac"


class _Ok(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - http.server's spelling
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def jobs(stack: Stack, eval_server: EvalServer) -> Iterator[dict[str, Any]]:
    """A completed job (real speech, a webhook delivered) and a failed one (not audio)."""
    hook = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), _Ok)
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    account, key = stack.new_account()
    with stack.client(key) as c:
        good = c.post("/v1/transcripts", json={
            "audio_url": eval_server.url("real/whisper/jfk.flac"),
            "webhook_url": f"http://127.0.0.1:{hook.server_address[1]}/hook"}).json()["id"]
        bad = c.post("/v1/transcripts", json={
            "audio_url": eval_server.url("manifest.json")}).json()["id"]
        done = stack.wait_transcript(c, good)
        failed = stack.wait_transcript(c, bad)
    assert done["status"] == "completed" and failed["status"] == "error", (done, failed)
    yield {"account": account, "completed": done, "failed": failed}
    hook.shutdown()


def token(stack: Stack) -> str:
    return (stack.data_dir / "console.token").read_text().strip()


def ch_client(stack: Stack, password: str | None = None) -> Any:
    import clickhouse_connect
    return clickhouse_connect.get_client(host="127.0.0.1", port=stack.console_port,
                                         username="default",
                                         password=token(stack) if password is None else password)


def raw(stack: Stack, query: str, **params: str) -> httpx.Response:
    return httpx.get(f"http://127.0.0.1:{stack.console_port}/", params={"query": query, **params},
                     auth=("default", token(stack)), timeout=30)


def test_clickhouse_connect_reads_the_live_stack(stack: Stack, jobs: dict[str, Any]) -> None:
    client = ch_client(stack)
    assert client.server_version and client.ping()
    done, failed = jobs["completed"], jobs["failed"]
    rows = client.query(
        "SELECT id, status, error_code, audio_duration FROM a5s.transcripts FINAL "
        "WHERE id IN {ids:Array(String)} ORDER BY status",
        parameters={"ids": [done["id"], failed["id"]]}).named_results()
    got = {r["id"]: r for r in rows}
    assert got[done["id"]]["status"] == "completed"
    assert got[done["id"]]["audio_duration"] == pytest.approx(done["audio_duration"], abs=0.01)
    assert got[failed["id"]]["error_code"] == failed["error"]["code"]
    frame = client.query_df("SELECT kind, sum(audio_seconds) AS s FROM usage_events FINAL "
                            "WHERE account_id = {a:String} GROUP BY kind",
                            parameters={"a": jobs["account"]})
    assert frame.set_index("kind").loc["completed", "s"] == pytest.approx(
        done["audio_duration"], abs=0.01)
    assert client.command("SELECT count() FROM transcripts WHERE id = {i:String}",
                          parameters={"i": done["id"]}) >= 1
    assert client.query("SELECT * FROM transcripts LIMIT 0").column_names[0] == "id"
    # the session is read-only, as ClickHouse reports it to clients that check
    assert client.command("SELECT getSetting('readonly')") == 1


WRITES = [
    ("INSERT INTO a5s.transcripts (id) VALUES ('tr_x')", 164),
    ("DROP TABLE a5s.transcripts", 164),
    ("TRUNCATE TABLE a5s.usage_events", 164),
    ("ALTER TABLE a5s.transcripts DELETE WHERE 1", 164),
    ("CREATE TABLE a5s.x (a UInt8) ENGINE = Memory", 164),
    ("SET readonly = 0", 164),
    ("SELECT 1 SETTINGS readonly = 0", 164),
    ("SELECT * FROM file('/etc/hostname', 'LineAsString')", 164),
    ("KILL QUERY WHERE 1", 164),
    ("SYSTEM DROP MARK CACHE", 164),
    ("SELECT 1; DROP TABLE a5s.transcripts", 62),
    ("SELECT 1 INTO OUTFILE '/tmp/a5s-outfile.txt'", 358),
]


def test_writes_through_the_endpoint_are_refused(stack: Stack, jobs: dict[str, Any]) -> None:
    from clickhouse_connect.driver.exceptions import DatabaseError
    tables = raw(stack, "SHOW TABLES FROM a5s").text
    before = raw(stack, "SELECT count() FROM a5s.transcripts FINAL").text
    for sql, code in WRITES:
        resp = httpx.post(f"http://127.0.0.1:{stack.console_port}/", content=sql,
                          auth=("default", token(stack)), timeout=30)
        assert resp.status_code in (400, 403), (sql, resp.status_code, resp.text)
        assert resp.headers["X-ClickHouse-Exception-Code"] == str(code), (sql, resp.text)
        assert resp.text.startswith(f"Code: {code}. DB::Exception: "), resp.text
    client = ch_client(stack)
    with pytest.raises(DatabaseError, match="Code: 164"):
        client.command("INSERT INTO a5s.usage_events (event_id) VALUES ('e')")
    with pytest.raises(DatabaseError, match="Code: 164"):
        client.insert("a5s.schema_migrations", [["999_x", jobs["completed"]["created_at"]]],
                      column_names=["version", "applied_at"],
                      column_type_names=["String", "String"])
    assert not Path("/tmp/a5s-outfile.txt").exists()
    assert raw(stack, "SELECT count() FROM a5s.transcripts FINAL").text == before
    assert raw(stack, "SHOW TABLES FROM a5s").text == tables and "transcripts\n" in tables
    assert raw(stack, "SELECT count() FROM a5s.usage_events WHERE event_id = 'e'").text == "0\n"
    assert raw(stack, "SELECT count() FROM a5s.schema_migrations "
                      "WHERE version = '999_x'").text == "0\n"
    with stack.client() as c:  # the service still answers from the same engine
        assert c.get("/health").status_code == 200


def test_curl_style_requests(stack: Stack, jobs: dict[str, Any]) -> None:
    base = f"http://127.0.0.1:{stack.console_port}"
    assert httpx.get(base + "/ping").text == "Ok.\n"
    resp = raw(stack, "SELECT id, status FROM transcripts FINAL WHERE id = {i:String}",
               param_i=jobs["completed"]["id"])
    assert resp.status_code == 200, resp.text
    assert resp.text == f"{jobs['completed']['id']}\tcompleted\n"
    assert resp.headers["X-ClickHouse-Format"] == "TabSeparated"
    assert resp.headers["Content-Type"].startswith("text/tab-separated-values")
    assert "read_rows" in resp.headers["X-ClickHouse-Summary"]
    resp = raw(stack, "SELECT status, count() AS n FROM a5s.transcripts FINAL GROUP BY status "
               "FORMAT JSON")
    assert resp.headers["X-ClickHouse-Format"] == "JSON"
    assert {r["status"] for r in resp.json()["data"]} >= {"completed", "error"}
    resp = raw(stack, "SELECT 1 AS one", default_format="CSVWithNames")
    assert resp.text == '"one"\n1\n' and resp.headers["Content-Type"].startswith("text/csv")
    resp = httpx.post(base + "/?enable_http_compression=1", content="SELECT number FROM numbers(5)",
                      headers={"X-ClickHouse-Key": token(stack), "Accept-Encoding": "gzip"})
    assert resp.headers["Content-Encoding"] == "gzip" and resp.text == "0\n1\n2\n3\n4\n"
    # as Grafana's data source (clickhouse-go, HTTP) asks: Native, a timeout setting, Basic
    resp = httpx.post(base + "/?default_format=Native&max_execution_time=60&database=a5s",
                      content="SELECT timeZone()", auth=("default", token(stack)))
    assert resp.status_code == 200 and resp.headers["X-ClickHouse-Format"] == "Native"
    assert resp.content.startswith(b"\x01\x01\x0atimeZone()\x06String")
    resp = httpx.post(base + "/?enable_http_compression=1", content="SELECT 42",
                      headers={"Authorization": f"Bearer {token(stack)}",
                               "Accept-Encoding": "deflate"})
    assert resp.headers["Content-Encoding"] == "deflate" and resp.text == "42\n"
    resp = httpx.get(base + "/", params={"query": "SELECT 1"}, auth=("default", "wrong"))
    assert resp.status_code == 401 and resp.headers["X-ClickHouse-Exception-Code"] == "516"
    assert resp.text.startswith("Code: 516. DB::Exception:")
    resp = raw(stack, "SELECT * FROM no_such_table")
    assert resp.status_code == 404 and resp.headers["X-ClickHouse-Exception-Code"] == "60"


def a5s_sql(stack: Stack, *args: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "A5S_DATA_DIR": str(stack.data_dir),
           "A5S_CONSOLE_PORT": str(stack.console_port), "PYTHONPATH": str(REPO)}
    env.pop("A5S_CLICKHOUSE_URL", None)
    env.update(extra_env)
    return subprocess.run([sys.executable, "-m", "ops.cli", "sql", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("path", QUERIES, ids=[p.stem for p in QUERIES])
def test_every_saved_query_runs_through_a5s_sql(stack: Stack, jobs: dict[str, Any],
                                                path: Path) -> None:
    proc = a5s_sql(stack, "--file", str(path))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    header, rule, *rows = proc.stdout.rstrip("\n").splitlines()
    assert set(rule) <= {"-", " "} and rows[-1].startswith("(")
    assert int(rows[-1].strip("()").split()[0]) >= 1, proc.stdout  # the jobs above are in it
    assert "day" in header or "hour" in header


def test_a5s_sql_inline_query_and_a_refused_write(stack: Stack, jobs: dict[str, Any]) -> None:
    proc = a5s_sql(stack, "SELECT id, status, audio_duration FROM {db}.transcripts FINAL "
                   "WHERE id = {id:String}", "--param", f"id={jobs['completed']['id']}")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["id", "status", "audio_duration"]
    assert lines[2].split()[:2] == [jobs["completed"]["id"], "completed"]
    assert lines[-1] == "(1 row)"
    proc = a5s_sql(stack, "DROP TABLE {db}.transcripts")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().startswith("Error: Code: 164.") and \
        len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_a5s_sql_takes_a_configured_clickhouse_url_unchanged(stack: Stack,
                                                          jobs: dict[str, Any]) -> None:
    """A ClickHouse server deployment sets ``A5S_CLICKHOUSE_URL=http://user:password@host``;
    no server runs here, so the stack's own endpoint stands in for one (same protocol)."""
    url = f"http://default:{token(stack)}@127.0.0.1:{stack.console_port}"
    query = "SELECT count() AS n FROM {db}.transcripts FINAL WHERE id = {id:String}"
    by_setting = a5s_sql(stack, query, "--param", f"id={jobs['failed']['id']}",
                         A5S_CLICKHOUSE_URL=url, A5S_CONSOLE_PORT="1")
    assert by_setting.returncode == 0, by_setting.stderr
    assert by_setting.stdout.splitlines()[2].strip() == "1"
    wrong = a5s_sql(stack, "SELECT 1", "--url",
                    f"http://default:nope@127.0.0.1:{stack.console_port}")
    assert wrong.returncode == 1 and "Code: 516" in wrong.stderr and "Traceback" not in wrong.stderr


def live_session(stack: Stack, timeout_s: float = 120.0) -> threading.Thread:
    """Streams three passes of a real recording over the WebSocket in a thread, once the
    dashboard's data shows the session open (``a5s_live_sessions``)."""
    from a5s.realtime import decode_file, stream
    _, key = stack.new_account()
    audio = itertools.chain(*(decode_file(JFK) for _ in range(3)))
    thread = threading.Thread(target=lambda: list(stream(audio, url=stack.ws_url, api_key=key)),
                              daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        data = httpx.get(f"http://127.0.0.1:{stack.console_port}/ops/v1/data",
                         headers={"Authorization": f"Bearer {token(stack)}"}, timeout=30).json()
        if data["registry"]["live_sessions"] >= 1:
            return thread
        time.sleep(0.5)
    raise TimeoutError("the live session never showed in /ops/v1/data")


def test_ops_dashboard_draws_charts_from_a_real_job(stack: Stack, jobs: dict[str, Any], browser,
                                                    tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    driver = browser
    console = f"http://127.0.0.1:{stack.console_port}"
    refused = httpx.get(console + "/ops/v1/data")  # the data needs the console token
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "session_required"
    live = live_session(stack)  # a real live session is open while the page first loads
    driver.get(console + "/ops?hours=1")
    assert "a5s ops" in driver.title
    driver.find_element(By.ID, "token").send_keys(token(stack))
    driver.find_element(By.ID, "save-token").click()
    WebDriverWait(driver, 60, poll_frequency=0.5).until(
        lambda d: d.execute_script("return document.body.dataset.loaded") is not None)
    status = driver.find_element(By.ID, "status").text
    assert status.startswith("updated"), status

    def marks(chart: str, css: str = "rect.bar") -> int:
        return len(driver.find_elements(By.CSS_SELECTOR, f"#{chart} svg {css}"))
    assert marks("audio-model") >= 1 and marks("audio-account") >= 1
    assert marks("jobs-status") >= 2  # completed and error
    assert marks("failures") >= 1
    for chart in ("queue-wait", "processing", "rtf"):
        assert marks(chart, "circle.point") >= 2, chart  # p50 and p95 of the job's bucket
    assert marks("webhooks") >= 1  # the completed job's delivery
    assert marks("live", "circle.point") >= 1 and marks("cpu", "circle.point") >= 1
    (first,) = driver.find_elements(By.CSS_SELECTOR, "#live svg circle.point")[:1]
    assert float(first.get_attribute("cy")) < 150, "the live session is not on the chart"
    assert marks("memory", "circle.point") >= 1 and marks("fds", "circle.point") >= 1
    labels = driver.find_element(By.ID, "failures").text
    assert jobs["failed"]["error"]["code"] in labels
    # The live charts hold one sample after the first poll: one time label, not one per end.
    for chart in ("queue-wait", "processing", "rtf", "live", "cpu", "memory", "fds"):
        times = [e.text for e in driver.find_elements(By.CSS_SELECTOR,
                                                      f"#{chart} svg text.x-label")]
        assert times and len(times) == len(set(times)), (chart, times)
    for origin in (console, stack.url("")):  # the icon every page load asks for
        icon = httpx.get(origin + "/favicon.ico")
        assert icon.status_code == 200 and icon.content[:4] == b"\0\0\1\0", icon.text[:200]
        assert icon.headers["content-type"].startswith("image/"), icon.headers

    driver.set_window_size(1280, 2400)  # every chart in one screenshot
    shot = tmp_path / "ops.png"
    shot.write_bytes(driver.get_screenshot_as_png())
    if os.environ.get("A5S_SCREENSHOTS"):
        Path(os.environ["A5S_SCREENSHOTS"], "ops.png").write_bytes(shot.read_bytes())
    width, height, rows = png_pixels(shot.read_bytes(), max_rows=2400)
    assert width >= 800 and height >= 600
    bpp = len(rows[0]) // width
    pixels = [row[i:i + 3] for row in rows[::2] for i in range(0, len(row), 2 * bpp)]
    green = sum(1 for p in pixels if p == bytes.fromhex("15803d"))  # completed bars
    blue = sum(1 for p in pixels if p == bytes.fromhex("1f6feb"))  # series and model bars
    red = sum(1 for p in pixels if p == bytes.fromhex("b91c1c"))  # error and failure bars
    assert green > 50 and blue > 50 and red > 50, (green, blue, red)
    live.join(120)
