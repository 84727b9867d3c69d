"""The ``a5s`` command line: ``up``, ``serve``, ``gateway``, ``worker``, ``admin``, ``topology``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from ops.sql_cli import sql as sql_command
from schemas.settings import Settings, SettingsError, load_settings

__all__ = ["main", "restart_delay"]


def _settings(data_dir: str | None, check: bool = True) -> Settings:
    """The settings, or a one-line error naming the bad ``A5S_*`` variable or config entry;
    ``check``: validate the engine settings too (what serves models)."""
    try:
        settings = load_settings(data_dir)
    except SettingsError as exc:
        raise click.ClickException(str(exc)) from exc
    if not check:
        return settings
    from pipeline.worker import startup_check
    try:
        startup_check(settings)
    except FileNotFoundError as exc:  # one line, before anything starts
        raise click.ClickException(str(exc)) from None
    return settings


data_dir_option = click.option("--data-dir", envvar="A5S_DATA_DIR", show_envvar=True,
                               default=None, help="Data directory (default ./a5s-data).")


@click.group()
def main() -> None:
    """a5s: self-hosted English speech-to-text."""


@main.command()
@data_dir_option
@click.option("--workers", type=click.IntRange(1, 64), default=1, show_default=True,
              envvar="A5S_WORKERS",
              help="Pipeline worker processes: the service plus N-1 extra workers "
                   "(they share the stages; see docs/scaling.md).")
def up(data_dir: str | None, workers: int) -> None:
    """Start everything on this machine: broker, Redis, ClickHouse engine, gateway, worker."""
    from ops.embedded import EmbeddedStack
    from ops.instance import InstanceError, claim, release
    from ops.workers import WorkerPool
    settings = _settings(data_dir)
    settings.data_path.mkdir(parents=True, exist_ok=True)
    try:
        for name, pid in claim(settings):
            click.echo(f"a5s: stopped the {name} (pid {pid}) a previous run left behind",
                       err=True)
    except InstanceError as exc:
        raise click.ClickException(str(exc)) from exc
    stack = EmbeddedStack(settings)
    click.echo(f"a5s: starting the embedded stack in {settings.data_path}")
    try:
        stack.start()
    except (OSError, RuntimeError, TimeoutError) as exc:
        release(settings)
        raise click.ClickException(f"the embedded stack did not start: {exc} "
                                   f"(logs in {settings.data_path / 'logs'})") from exc
    env = {**os.environ, "A5S_DATA_DIR": str(settings.data_path)}
    pool = WorkerPool(settings, workers - 1, lambda: _restart(stack, "broker"), env)
    stopping = False
    child: subprocess.Popen[bytes] | None = None

    def stop(*_: Any) -> None:
        nonlocal stopping
        stopping = True
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM)

    # A closed terminal (SIGHUP) stops like Ctrl-C. The service runs in its own session,
    # so a terminal's signals reach only this supervisor, which stops it in order: the
    # service stops accepting and drains, then the broker and Valkey stop.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop)
    restarts = 0
    try:
        while not stopping:
            child = subprocess.Popen([sys.executable, "-P", "-m", "ops.cli", "serve"], env=env,
                                     start_new_session=True)
            started = time.monotonic()
            code = _supervise(child, stack, lambda: stopping, pool.tick)
            if stopping:
                break
            restarts = restarts + 1 if time.monotonic() - started < STABLE_S else 1
            delay = restart_delay(restarts, settings.restart_delay_max_s)
            click.echo(f"a5s: service exited with {code}; restarting in {delay:g} s", err=True)
            time.sleep(delay)
            # A killed consumer never left its groups, and the embedded broker does not expire
            # members; restarting it (its log and offsets persist) clears the stale members.
            _restart(stack, "broker")
            for name in stack.check():
                _restart(stack, name)
    finally:
        pool.stop()
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM)
            try:
                child.wait(30)
            except subprocess.TimeoutExpired:
                child.kill()
        stack.stop()
        release(settings)
        click.echo("a5s: stopped")


STABLE_S = 30.0
"""A service that ran this long before it died is restarted after the shortest delay."""


def restart_delay(restarts: int, cap_s: float) -> float:
    """Seconds before the ``restarts``-th restart in a row of a service that keeps dying:
    2, 4, 8 ... up to ``cap_s``, so a crash loop (a record that kills the process each
    time it is replayed) does not keep both cores loading models."""
    return min(cap_s, 2.0 ** min(max(restarts, 1), 16))


WATCH_INTERVAL_S = 0.5
"""How often ``a5s up`` looks at its embedded components while the service runs."""
STOP_GRACE_S = 30.0
"""How long the service may take to stop after Ctrl-C or SIGTERM before it is killed."""


def _supervise(child: subprocess.Popen[bytes], stack: Any, stopping: Any,
               tick: Any = None) -> int:
    """Wait for the service to exit; meanwhile restart any embedded component that died.

    Valkey keeps its data in an append-only file, so restarted in place on the same port
    it is the same Redis to the service, whose client reconnects by itself. A dead broker
    takes the service with it: the broker's log and offsets are on disk, but a running
    Faust worker that rejoins its group after a broker restart can drop records it had
    fetched around the rebalance (seen in tests/integration/test_faults.py), while a
    fresh process resumes cleanly from the committed offsets. So the service is stopped
    and the caller restarts both.
    """
    stop_asked: float | None = None
    while True:
        try:
            return child.wait(WATCH_INTERVAL_S)
        except subprocess.TimeoutExpired:
            pass
        if stopping():
            # A service that does not finish stopping in time is killed, so the embedded
            # components are still stopped before whoever stops us loses patience.
            stop_asked = stop_asked or time.monotonic()
            if time.monotonic() - stop_asked > STOP_GRACE_S:
                child.kill()
            continue
        dead = stack.check()
        if "broker" in dead:
            click.echo("a5s: the embedded broker died; restarting it and the service", err=True)
            child.send_signal(signal.SIGTERM)
            try:
                return child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()
                return child.wait()
        for name in dead:
            _restart(stack, name)
        if tick is not None:  # extra workers, and stale group members of dead ones
            tick()


def _restart(stack: Any, name: str) -> None:
    """Restart one embedded component; a failed attempt is retried on the next look."""
    click.echo(f"a5s: restarting the embedded {name}", err=True)
    try:
        stack.restart(name)
    except (OSError, RuntimeError, TimeoutError) as exc:
        click.echo(f"a5s: the embedded {name} did not come back ({exc}); trying again",
                   err=True)


@main.command()
@data_dir_option
def serve(data_dir: str | None) -> None:
    """Gateway and pipeline worker in one process (what ``up`` runs)."""
    from ops.service import ROLES, run
    from stores.process import exit_now
    exit_now(run(_settings(data_dir), set(ROLES)))


@main.command()
@data_dir_option
def gateway(data_dir: str | None) -> None:
    """The REST and WebSocket gateway alone (distributed deployments; ``python -m gateway``)."""
    from gateway.serve import run
    from stores.process import exit_now
    exit_now(run(_settings(data_dir)))


@main.command()
@data_dir_option
def worker(data_dir: str | None) -> None:
    """A pipeline worker alone (distributed deployments; ``python -m pipeline``)."""
    from pipeline.worker import run
    from stores.process import exit_now
    exit_now(run(_settings(data_dir)))


@main.group()
def models() -> None:
    """Model directories for the Zipformer engine (see docs/models.md)."""


@models.command("check")
@click.argument("model_dir", type=click.Path(file_okay=False, path_type=Path))
def models_check(model_dir: Path) -> None:
    """Say what an icefall export in MODEL_DIR holds and decode a bundled clip with it."""
    from ops.models_check import check_dir
    try:
        check_dir(model_dir, click.echo)
    except FileNotFoundError as exc:
        raise click.ClickException(str(exc)) from None


@main.command()
def topology() -> None:
    """Print the dataflow: every node, topic, table, object key and Redis key, and who reads
    and writes each (docs/architecture.md)."""
    from topologies import describe
    click.echo(describe(Settings().topic_prefix))


# --- admin: a client of the console API ---------------------------------------------------------

@dataclass(frozen=True)
class Console:
    """Where ``a5s admin`` sends its requests, and the settings that hold its token."""

    url: str
    settings: Settings


@main.group()
@data_dir_option
@click.option("--url", default=None,
              help="The console's URL (default http://127.0.0.1:<console port>, the port as "
                   "a5s up was given it: A5S_CONSOLE_PORT, else its run file in the data "
                   "directory).")
@click.pass_context
def admin(ctx: click.Context, data_dir: str | None, url: str | None) -> None:
    """Accounts, keys and webhook secrets (talks to the running service's console).

    The service is found from the settings a5s up was given: A5S_DATA_DIR (or --data-dir),
    whose console.token authenticates (or A5S_CONSOLE_TOKEN), and A5S_CONSOLE_PORT, else the
    port recorded in the data directory's run/up.json.
    """
    from ops.instance import located
    settings = located(_settings(data_dir, check=False))
    ctx.obj = Console(url.rstrip("/") if url else settings.console_url, settings)


def _console(console: Console, method: str, path: str, body: Any = None) -> Any:
    import httpx

    from ops.instance import InstanceError, client_token
    try:
        token = client_token(console.settings)
    except InstanceError as exc:
        raise click.ClickException(str(exc)) from exc
    try:
        resp = httpx.request(method, console.url + "/console/v1" + path, json=body,
                             headers={"Authorization": f"Bearer {token}"}, timeout=30)
    except httpx.HTTPError as exc:
        raise click.ClickException(f"cannot reach the console at {console.url}: {exc} (is a5s "
                                   "running there? --data-dir, A5S_DATA_DIR, A5S_CONSOLE_PORT "
                                   "or --url name it)") from exc
    try:
        data = resp.json()
    except ValueError:
        raise click.ClickException(f"{console.url} answered {resp.status_code} without JSON: "
                                   "is it the console of a5s? (--url)") from None
    if resp.status_code >= 400:
        err = data.get("error", {})
        raise click.ClickException(f"{err.get('code')}: {err.get('message')}"
                                   + (f" ({err['param']})" if err.get("param") else ""))
    return data


def _show(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, default=str))


limit_options = [
    click.option("--usage-limit-seconds", type=float), click.option("--max-concurrent-jobs",
                                                                    type=int),
    click.option("--max-queued-jobs", type=int), click.option("--max-requests-per-minute",
                                                              type=int),
    click.option("--max-audio-duration-seconds", type=int),
    click.option("--retention-days", type=int),
    click.option("--max-concurrent-sessions", type=int),
    click.option("--max-session-seconds", type=int),
]


def _with_limits(fn: Any) -> Any:
    for option in reversed(limit_options):
        fn = option(fn)
    return fn


@admin.command("create-account")
@click.option("--email", required=True)
@click.option("--name", "display_name", default="")
@click.option("--tier", default="free")
@click.option("--async/--no-async", "async_enabled", default=True,
              help="Access to a5s-async-v1.")
@click.option("--streaming/--no-streaming", "streaming_enabled", default=True,
              help="Access to a5s-v2-streaming.")
@click.option("--with-key/--no-key", default=True, help="Also create a first API key.")
@_with_limits
@click.pass_obj
def create_account(console: Console, with_key: bool, **fields: Any) -> None:
    body = {k: v for k, v in fields.items() if v is not None}
    data = _console(console, "POST", "/accounts", body)
    if with_key:
        data["key"] = _console(console, "POST", f"/accounts/{data['account']['id']}/keys",
                               {"name": "default"})
    _show(data)


@admin.command("list-accounts")
@click.pass_obj
def list_accounts(console: Console) -> None:
    _show(_console(console, "GET", "/accounts"))


@admin.command("show-account")
@click.argument("account_id")
@click.pass_obj
def show_account(console: Console, account_id: str) -> None:
    _show(_console(console, "GET", f"/accounts/{account_id}"))


@admin.command("update-account")
@click.argument("account_id")
@click.option("--name", "display_name")
@click.option("--tier")
@click.option("--async/--no-async", "async_enabled", default=None)
@click.option("--streaming/--no-streaming", "streaming_enabled", default=None)
@_with_limits
@click.pass_obj
def update_account(console: Console, account_id: str, **fields: Any) -> None:
    body = {k: v for k, v in fields.items() if v is not None}
    _show(_console(console, "PATCH", f"/accounts/{account_id}", body))


def _status_command(name: str, status: str, help_text: str) -> None:
    @admin.command(name, help=help_text)
    @click.argument("account_id")
    @click.pass_obj
    def command(console: Console, account_id: str) -> None:
        _show(_console(console, "PATCH", f"/accounts/{account_id}", {"status": status}))


_status_command("suspend", "suspended", "Suspend an account (403 account_suspended).")
_status_command("disable", "disabled", "Disable an account (403 account_disabled).")
_status_command("activate", "active", "Re-activate a suspended or disabled account.")


@admin.command("create-key")
@click.argument("account_id")
@click.option("--name", default="default")
@click.pass_obj
def create_key(console: Console, account_id: str, name: str) -> None:
    """Create an API key; it is printed once and only its hash is stored."""
    _show(_console(console, "POST", f"/accounts/{account_id}/keys", {"name": name}))


@admin.command("list-keys")
@click.argument("account_id")
@click.pass_obj
def list_keys(console: Console, account_id: str) -> None:
    _show(_console(console, "GET", f"/accounts/{account_id}/keys"))


@admin.command("revoke-key")
@click.argument("key_id")
@click.pass_obj
def revoke_key(console: Console, key_id: str) -> None:
    _show(_console(console, "DELETE", f"/keys/{key_id}"))


@admin.command("webhook-secret")
@click.argument("account_id")
@click.option("--rotate", is_flag=True, help="Replace the secret with a new one.")
@click.pass_obj
def webhook_secret(console: Console, account_id: str, rotate: bool) -> None:
    _show(_console(console, "POST" if rotate else "GET",
                   f"/accounts/{account_id}/webhook-secret"))


# --- API client commands --------------------------------------------------------------------------

key_option = click.option("--key", envvar="A5S_API_KEY", required=True,
                          help="API key (default $A5S_API_KEY).")
url_option = click.option("--url", envvar="A5S_URL", default=None,
                          help="Service base URL (default $A5S_URL, else the local service as "
                               "a5s up was given it: A5S_HOST and A5S_PORT, else the port "
                               "recorded in the data directory's run/up.json).")
_ELSEWHERE = ("is a5s running there? (`a5s up` starts it; --url, $A5S_URL, or A5S_PORT and "
              "A5S_DATA_DIR as a5s up had them, point elsewhere)")


def _api_errors(fn: Any) -> Any:
    """The service's URL (``--url``, else the local one found from ``--data-dir`` and the
    settings, :func:`ops.instance.located`); client exceptions become one-line CLI errors
    with their code and request id."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, data_dir: str | None, url: str | None, **kwargs: Any) -> Any:
        from a5s import A5sError, APIConnectionError, APIStatusError, StreamError
        from ops.instance import api_url, located
        url = url or api_url(located(_settings(data_dir, check=False)))
        try:
            return fn(*args, url=url, **kwargs)
        except APIConnectionError as exc:
            reason = str(exc).removeprefix("cannot reach the service: ")
            raise click.ClickException(f"cannot reach the service at {url} ({reason}): "
                                       f"{_ELSEWHERE}") from exc
        except APIStatusError as exc:
            raise click.ClickException(f"{exc.code}: {exc.message}" + (
                f" (param {exc.param})" if exc.param else "") + (
                f" [{exc.request_id}]" if exc.request_id else "")) from exc
        except StreamError as exc:
            hint = f": {_ELSEWHERE}" if exc.code == "connection_failed" else ""
            raise click.ClickException(f"{exc.code}: {exc.message}{hint}") from exc
        except A5sError as exc:
            raise click.ClickException(str(exc)) from exc
    return wrapper


def _probe(path: str) -> None:
    """A file that is missing or not audio is refused here, before anything is sent."""
    from a5s.audio import probe_audio
    try:
        probe_audio(path)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc


FORMATS = ("srt", "vtt", "json")
"""``a5s transcribe``'s formats besides its default, one line per speaker turn."""


def output_format(flags: dict[str, bool], output: str | None) -> str | None:
    """The format ``a5s transcribe`` writes: the one flag given, else the ``--output`` file's
    extension where it names one of :data:`FORMATS`, else None (speaker turns).

    Raises:
        click.ClickException: two format flags, or a flag that contradicts the extension.
    """
    given = [name for name in FORMATS if flags.get(name)]
    if len(given) > 1:
        names = [f"--{n}" for n in given]
        raise click.ClickException(f"{', '.join(names[:-1])} and {names[-1]} conflict: give "
                                   "one format")
    suffix = Path(output).suffix.lower().lstrip(".") if output else ""
    implied = suffix if suffix in FORMATS else None
    if given and implied and given[0] != implied:
        raise click.ClickException(f"--{given[0]} conflicts with --output {output} (a .{implied} "
                                   "file): give one format")
    return given[0] if given else implied


def _writable(output: str | None) -> None:
    """Refuse an ``--output`` path that cannot be written before anything is sent."""
    if output is None:
        return
    path = Path(output)
    if path.is_dir():
        raise click.ClickException(f"--output {output}: is a directory")
    if not path.absolute().parent.is_dir():
        raise click.ClickException(f"--output {output}: no such directory "
                                   f"{path.absolute().parent}")
    if not os.access(path if path.exists() else path.absolute().parent, os.W_OK):
        raise click.ClickException(f"--output {output}: permission denied")


@main.command()
@click.argument("source")
@click.option("--srt", is_flag=True, help="SubRip captions.")
@click.option("--vtt", is_flag=True, help="WebVTT captions.")
@click.option("--json", "as_json", is_flag=True, help="The transcript as JSON.")
@click.option("--output", "-o", default=None, metavar="FILE",
              help="Write the result to FILE instead of stdout; its extension (.srt, .vtt, "
                   ".json) gives the format when no flag does.")
@click.option("--timeout", type=float, default=None, help="Give up waiting after N seconds.")
@key_option
@url_option
@data_dir_option
@_api_errors
def transcribe(source: str, srt: bool, vtt: bool, as_json: bool, output: str | None,
               timeout: float | None, key: str, url: str) -> None:
    """Transcribe a FILE or an http(s) URL; progress on stderr, the result on stdout (or
    --output FILE).

    Without a format, one line per speaker turn: ``speaker_1: text``.
    """
    from a5s import Client
    fmt = output_format({"srt": srt, "vtt": vtt, "json": as_json}, output)
    _writable(output)
    if not source.startswith(("http://", "https://")):
        _probe(source)
    started = time.monotonic()

    def progress(stage: str, transcript: Any) -> None:
        tid = f"{transcript.id} " if transcript is not None else ""
        click.echo(f"a5s: {tid}{stage} ({time.monotonic() - started:.1f} s)", err=True)

    with Client(key, base_url=url) as client:
        done = client.transcribe(source, timeout=timeout, on_progress=progress)
        if fmt in ("srt", "vtt"):
            text = client.subtitles(done.id, fmt)
        elif fmt == "json":
            text = done.model_dump_json(indent=2) + "\n"
        else:
            text = "".join(f"{utt.speaker}: {utt.text}\n" for utt in done.utterances or [])
    if output is None:
        click.echo(text, nl=False)
        return
    try:
        Path(output).write_text(text)
    except OSError as exc:
        raise click.ClickException(f"--output {output}: {exc.strerror or exc} (the transcript "
                                   f"is {done.id})") from exc
    click.echo(f"a5s: wrote {output}", err=True)


@main.command()
@click.argument("source")
@click.option("--language", default="en-US", show_default=True)
@key_option
@url_option
@data_dir_option
@_api_errors
def stream(source: str, language: str, key: str, url: str) -> None:
    """Stream a FILE over the realtime WebSocket in real time and print the live transcript.

    On a terminal the line being spoken is rewritten in place; each settled segment
    ends with a newline.
    """
    from a5s.realtime import stream as live
    _probe(source)
    ws_url = "ws" + url.rstrip("/").removeprefix("http") + "/v1/realtime"
    tty = sys.stdout.isatty()
    committed = ""
    for msg in live(source, url=ws_url, api_key=key, language=language):
        if msg.type == "transcript" and msg.text is not None:
            text = msg.text
            tail = text[len(committed):].strip() if text.startswith(committed) else text
            if msg.is_final:
                click.echo(("\r\x1b[K" if tty else "") + tail)
                committed = text
            elif tty:
                click.echo("\r\x1b[K" + tail, nl=False)
        elif msg.type == "finished":
            extra = getattr(msg, "model_extra", None) or {}
            click.echo(f"a5s: finished, {extra.get('audio_ms', 0) / 1000:.1f} s of audio, "
                       f"{extra.get('billed_ms', 0) / 1000:.1f} s billed", err=True)


main.add_command(sql_command)

if __name__ == "__main__":
    main()
