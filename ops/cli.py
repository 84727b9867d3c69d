"""The ``a5s`` command line: ``up``, ``serve``, ``gateway``, ``worker``, ``admin``, ``topology``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

import click

from schemas.settings import Settings

__all__ = ["main"]


def _settings(data_dir: str | None) -> Settings:
    return Settings(data_dir=data_dir) if data_dir else Settings()  # type: ignore[arg-type]


data_dir_option = click.option("--data-dir", envvar="A5S_DATA_DIR", default=None,
                               help="Data directory (default ./a5s-data).")


@click.group()
def main() -> None:
    """a5s: self-hosted English speech-to-text."""


@main.command()
@data_dir_option
def up(data_dir: str | None) -> None:
    """Start everything on this machine: broker, Redis, ClickHouse engine, gateway, worker."""
    from ops.embedded import EmbeddedStack
    settings = _settings(data_dir)
    settings.data_path.mkdir(parents=True, exist_ok=True)
    stack = EmbeddedStack(settings)
    click.echo(f"a5s: starting the embedded stack in {settings.data_path}")
    stack.start()
    env = {**os.environ, "A5S_DATA_DIR": str(settings.data_path)}
    stopping = False
    child: subprocess.Popen[bytes] | None = None

    def stop(*_: Any) -> None:
        nonlocal stopping
        stopping = True
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    restarts = 0
    try:
        while not stopping:
            child = subprocess.Popen([sys.executable, "-m", "ops.cli", "serve"], env=env)
            started = time.monotonic()
            code = _wait(child)
            if stopping:
                break
            dead = stack.check()
            if dead:
                click.echo(f"a5s: embedded {', '.join(dead)} died; stopping", err=True)
                break
            restarts = restarts + 1 if time.monotonic() - started < 30 else 1
            delay = min(30, 2 ** min(restarts, 5))
            click.echo(f"a5s: service exited with {code}; restarting in {delay} s", err=True)
            time.sleep(delay)
    finally:
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM)
            try:
                child.wait(30)
            except subprocess.TimeoutExpired:
                child.kill()
        stack.stop()
        click.echo("a5s: stopped")


def _wait(child: subprocess.Popen[bytes]) -> int:
    while True:
        try:
            return child.wait()
        except InterruptedError:  # pragma: no cover - signals are handled by the callback
            continue


@main.command()
@data_dir_option
def serve(data_dir: str | None) -> None:
    """Gateway and pipeline worker in one process (what ``up`` runs)."""
    from ops.service import ROLES, run
    sys.exit(run(_settings(data_dir), set(ROLES)))


@main.command()
@data_dir_option
def gateway(data_dir: str | None) -> None:
    """The REST and WebSocket gateway alone (distributed deployments)."""
    from ops.service import run
    sys.exit(run(_settings(data_dir), {"gateway"}))


@main.command()
@data_dir_option
def worker(data_dir: str | None) -> None:
    """A pipeline worker alone (distributed deployments)."""
    from ops.service import run
    sys.exit(run(_settings(data_dir), {"worker"}))


@main.command()
def topology() -> None:
    """Print every topic and which component reads and writes it."""
    from topologies import describe
    click.echo(describe(Settings().topic_prefix))


# --- admin: a client of the console API ---------------------------------------------------------

@main.group()
@data_dir_option
@click.pass_context
def admin(ctx: click.Context, data_dir: str | None) -> None:
    """Accounts, keys and webhook secrets (talks to the running service's console)."""
    ctx.obj = _settings(data_dir)


def _console(settings: Settings, method: str, path: str, body: Any = None) -> Any:
    import httpx

    from gateway.console import console_token
    try:
        resp = httpx.request(method, settings.console_url + "/console/v1" + path, json=body,
                             headers={"Authorization": f"Bearer {console_token(settings)}"},
                             timeout=30)
    except httpx.HTTPError as exc:
        raise click.ClickException(f"cannot reach the console at {settings.console_url}: "
                                   f"{exc} (is a5s running?)") from exc
    data = resp.json()
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
def create_account(settings: Settings, with_key: bool, **fields: Any) -> None:
    body = {k: v for k, v in fields.items() if v is not None}
    data = _console(settings, "POST", "/accounts", body)
    if with_key:
        data["key"] = _console(settings, "POST", f"/accounts/{data['account']['id']}/keys",
                               {"name": "default"})
    _show(data)


@admin.command("list-accounts")
@click.pass_obj
def list_accounts(settings: Settings) -> None:
    _show(_console(settings, "GET", "/accounts"))


@admin.command("show-account")
@click.argument("account_id")
@click.pass_obj
def show_account(settings: Settings, account_id: str) -> None:
    _show(_console(settings, "GET", f"/accounts/{account_id}"))


@admin.command("update-account")
@click.argument("account_id")
@click.option("--name", "display_name")
@click.option("--tier")
@click.option("--async/--no-async", "async_enabled", default=None)
@click.option("--streaming/--no-streaming", "streaming_enabled", default=None)
@_with_limits
@click.pass_obj
def update_account(settings: Settings, account_id: str, **fields: Any) -> None:
    body = {k: v for k, v in fields.items() if v is not None}
    _show(_console(settings, "PATCH", f"/accounts/{account_id}", body))


def _status_command(name: str, status: str, help_text: str) -> None:
    @admin.command(name, help=help_text)
    @click.argument("account_id")
    @click.pass_obj
    def command(settings: Settings, account_id: str) -> None:
        _show(_console(settings, "PATCH", f"/accounts/{account_id}", {"status": status}))


_status_command("suspend", "suspended", "Suspend an account (403 account_suspended).")
_status_command("disable", "disabled", "Disable an account (403 account_disabled).")
_status_command("activate", "active", "Re-activate a suspended or disabled account.")


@admin.command("create-key")
@click.argument("account_id")
@click.option("--name", default="default")
@click.pass_obj
def create_key(settings: Settings, account_id: str, name: str) -> None:
    """Create an API key; it is printed once and only its hash is stored."""
    _show(_console(settings, "POST", f"/accounts/{account_id}/keys", {"name": name}))


@admin.command("list-keys")
@click.argument("account_id")
@click.pass_obj
def list_keys(settings: Settings, account_id: str) -> None:
    _show(_console(settings, "GET", f"/accounts/{account_id}/keys"))


@admin.command("revoke-key")
@click.argument("key_id")
@click.pass_obj
def revoke_key(settings: Settings, key_id: str) -> None:
    _show(_console(settings, "DELETE", f"/keys/{key_id}"))


@admin.command("webhook-secret")
@click.argument("account_id")
@click.option("--rotate", is_flag=True, help="Replace the secret with a new one.")
@click.pass_obj
def webhook_secret(settings: Settings, account_id: str, rotate: bool) -> None:
    _show(_console(settings, "POST" if rotate else "GET",
                   f"/accounts/{account_id}/webhook-secret"))


if __name__ == "__main__":
    main()
