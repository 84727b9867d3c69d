"""Who holds a data directory and its ports: a running ``a5s up``, leftovers of a dead one,
or another program.

``a5s up`` records itself in ``run/up.json`` (pid and ports; the command-line clients find
the service's ports there, :func:`located`). On start it refuses to run
beside a live instance of the same data directory, naming it; processes a dead instance
left behind (broker, Valkey, the service and its workers, found through their pidfiles
and checked against their command line and data directory) are stopped; a port still
taken is reported with the process that holds it. Linux ``/proc`` is the source.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from schemas.settings import Settings

from .procstat import alive

__all__ = ["InstanceError", "claim", "release", "leftovers", "port_owner", "stop_pid", "located",
           "api_url", "client_token"]


class InstanceError(RuntimeError):
    """This ``a5s up`` cannot start; the message says why in one line."""


def _cmdline(pid: int) -> list[str]:
    with contextlib.suppress(OSError):
        return [a for a in Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0") if a]
    return []


def _environ(pid: int) -> dict[str, str]:
    with contextlib.suppress(OSError):
        pairs = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace").split("\0")
        return dict(p.split("=", 1) for p in pairs if "=" in p)
    return {}


def _read_pid(path: Path) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        return int(path.read_text().split()[0])
    return None


def _ports(settings: Settings) -> dict[str, int]:
    return {"API": settings.port, "console": settings.console_port,
            "broker": settings.embedded.kafka, "Redis": settings.embedded.redis}


def _same_dir(a: str | None, b: Path) -> bool:
    return bool(a) and Path(a).resolve() == b.resolve()  # type: ignore[arg-type]


def _belongs(pid: int, name: str, root: Path) -> bool:
    """Whether ``pid`` is this data directory's ``name`` process (pids are reused)."""
    argv = _cmdline(pid)
    if name == "broker":
        return str(root / "broker") in argv
    if name == "redis":  # Valkey rewrites its title, but it runs in its ``--dir``
        with contextlib.suppress(OSError):
            return Path(os.readlink(f"/proc/{pid}/cwd")) == (root / "redis").resolve()
        return False
    # the service and extra workers: ``python -m ops.cli serve|worker`` with A5S_DATA_DIR
    return "ops.cli" in argv and _same_dir(_environ(pid).get("A5S_DATA_DIR"), root)


def leftovers(settings: Settings) -> list[tuple[str, int]]:
    """Processes of this data directory that outlived their ``a5s up``, as (name, pid)."""
    run = settings.data_path / "run"
    found = []
    for pidfile in sorted(run.glob("*.pid")) if run.is_dir() else []:
        name = pidfile.stem if pidfile.stem in ("broker", "redis") else "service"
        pid = _read_pid(pidfile)
        if pid and pid != os.getpid() and alive(pid) and _belongs(pid, name, settings.data_path):
            found.append((pidfile.stem, pid))
        else:
            pidfile.unlink(missing_ok=True)
    # the service first: it drains into the broker and Valkey it still holds
    return sorted(found, key=lambda f: f[0] in ("broker", "redis"))


def stop_pid(pid: int, timeout_s: float) -> None:
    """SIGTERM, then SIGKILL after ``timeout_s``."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def port_owner(port: int) -> int | None:
    """The pid listening on TCP ``port`` (any address), if this user can see it."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                cols = line.split()
                if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(f"socket:[{cols[9]}]")
    if not inodes:
        return None
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in (proc / "fd").iterdir():
                with contextlib.suppress(OSError):
                    if os.readlink(fd) in inodes:
                        return int(proc.name)
    return None


def _port_in_use(port: int) -> bool:
    import socket
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _describe(pid: int | None) -> str:
    if pid is None:
        return "another process"
    argv = _cmdline(pid)
    prog = " ".join(Path(argv[0]).name if i == 0 else a for i, a in enumerate(argv[:6]))
    data_dir = _environ(pid).get("A5S_DATA_DIR")
    if "--data-dir" in argv[:-1]:  # the embedded broker: <data_dir>/broker
        data_dir = str(Path(argv[argv.index("--data-dir") + 1]).parent)
    elif "valkey" in prog:  # Valkey runs in <data_dir>/redis
        with contextlib.suppress(OSError):
            data_dir = str(Path(os.readlink(f"/proc/{pid}/cwd")).parent)
    return f"pid {pid} ({prog}{', data directory ' + data_dir if data_dir else ''})"


def claim(settings: Settings) -> list[tuple[str, int]]:
    """Make this process the data directory's ``a5s up``; returns the leftovers it stopped.

    Raises:
        InstanceError: another ``a5s up`` runs on this data directory, or a port is taken.
    """
    root = settings.data_path
    record = root / "run" / "up.json"
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        other = _record(settings)
        pid = int(other["pid"])
        if pid != os.getpid() and alive(pid) and "up" in _cmdline(pid):
            ports = ", ".join(f"{k} {v}" for k, v in other.get("ports", {}).items())
            raise InstanceError(f"a5s is already running on {root} (pid {pid}; ports: {ports});"
                                f" stop it first (Ctrl-C in its terminal, or kill {pid})")
    stopped = leftovers(settings)
    for name, pid in stopped:
        stop_pid(pid, 30.0 if name not in ("broker", "redis") else 10.0)
    for what, port in _ports(settings).items():
        if _port_in_use(port):
            raise InstanceError(
                f"port {port} ({what}) is in use by {_describe(port_owner(port))}; stop it, "
                "or give this instance other ports (A5S_PORT, A5S_CONSOLE_PORT, "
                "A5S_EMBEDDED__KAFKA, A5S_EMBEDDED__REDIS)")
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps({"pid": os.getpid(), "ports": _ports(settings)}))
    return stopped


def _record(settings: Settings) -> dict[str, Any]:
    """What ``a5s up`` wrote in ``run/up.json`` (pid and ports); raises OSError or
    ValueError where there is no such file or it does not parse."""
    record = json.loads((settings.data_path / "run" / "up.json").read_text())
    if not isinstance(record, dict):
        raise ValueError("run/up.json does not hold an object")
    return record


_RECORDED = {"port": "API", "console_port": "console"}
"""Settings fields and the names ``run/up.json`` gives their ports."""


def located(settings: Settings) -> Settings:
    """``settings`` with the API and console ports of the ``a5s up`` that runs (or ran) on
    their data directory, as its ``run/up.json`` recorded them, wherever ``A5S_PORT`` /
    ``A5S_CONSOLE_PORT`` (or their entries in the config file) do not name them: the clients
    (``transcribe``, ``stream``, ``admin``, ``sql``) find the service from the settings
    ``a5s up`` was given. The record stays while processes of a killed ``a5s up`` may still
    serve, and is removed by one that stops."""
    try:
        ports = _record(settings).get("ports", {})
        update = {name: int(ports[key]) for name, key in _RECORDED.items()
                  if name not in settings.model_fields_set and key in ports}
    except (OSError, ValueError, TypeError, AttributeError):  # none, or not one a5s wrote
        return settings
    return settings.model_copy(update=update)


def api_url(settings: Settings) -> str:
    """The base URL of the API listener on this machine (loopback where it binds every
    address)."""
    host = settings.host if settings.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
    return f"http://{f'[{host}]' if ':' in host else host}:{settings.port}"


def client_token(settings: Settings) -> str:
    """The console token a client of the console sends (``a5s admin``, ``a5s sql``).

    Raises:
        InstanceError: there is none, so the data directory is likely not the service's.
    """
    from gateway.console import console_token
    try:
        return console_token(settings, create=False)
    except FileNotFoundError as exc:
        raise InstanceError(
            f"no console token in {exc.args[0]} and A5S_CONSOLE_TOKEN is not set: is "
            f"{settings.data_path} the data directory a5s up runs on? (--data-dir or "
            "A5S_DATA_DIR name it)") from None


def release(settings: Settings) -> None:
    with contextlib.suppress(OSError, ValueError, KeyError):
        if _record(settings)["pid"] == os.getpid():
            (settings.data_path / "run" / "up.json").unlink()
