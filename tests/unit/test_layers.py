"""No import runs from a lower layer to a higher one, or between the two peers.

Layers, bottom up: ``security`` (signing, tokens, the guarded HTTP client) and
``evaluation`` (scoring) import nothing of ours; ``schemas`` may import ``security``;
``topologies`` schemas; ``stores`` schemas and topologies; ``pipeline`` and ``gateway``
(peers) the layers below, never each other nor ``ops``; ``ops`` on top. The client SDK
``a5s`` imports itself, ``security`` and ``schemas`` (it parses answers into the API
contract's models, ``schemas.api``). Benchmarks (``bench``) are imported by
nothing but themselves, and no test imports them.

Every module's source is read with ``ast``: imports at any depth (inside functions
too), relative imports resolved, and ``importlib.import_module("...")`` with a literal
name counted as an import.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OURS = {"security", "evaluation", "schemas", "topologies", "stores", "pipeline", "gateway",
        "a5s", "ops", "bench", "tests"}
SERVICE_BELOW = {"security", "schemas", "topologies", "stores"}
MAY_IMPORT: dict[str, set[str]] = {
    "security": set(),
    "evaluation": set(),
    "schemas": {"security"},
    "topologies": {"schemas", "security"},
    "stores": {"schemas", "topologies", "security"},
    "pipeline": SERVICE_BELOW,
    "gateway": SERVICE_BELOW,
    "a5s": {"security", "schemas"},
    "ops": OURS - {"bench", "tests"},
    "bench": OURS - {"tests"},
    "tests": OURS - {"bench"},
}
KNOWN: dict[tuple[str, str], str] = {}
"""Imports that break the rule today, each with the move that ends it. An entry that no
longer matches anything fails too, so the list only shrinks."""


def _modules() -> Iterator[Path]:
    for top in sorted(OURS):
        yield from sorted((REPO / top).rglob("*.py"))


def _imports(path: Path, root: Path = REPO) -> Iterator[tuple[int, str]]:
    """(line, absolute dotted name) of every import in ``path`` (a module under ``root``)."""
    package = list(path.relative_to(root).parts[:-1])
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - (node.level - 1)]
                yield node.lineno, ".".join(base + ([node.module] if node.module else []))
            elif node.module:
                yield node.lineno, node.module
        elif (isinstance(node, ast.Call) and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and (getattr(node.func, "attr", None) == "import_module"
                   or getattr(node.func, "id", None) in ("import_module", "__import__"))):
            yield node.lineno, node.args[0].value


def _offences() -> list[tuple[str, int, str, str]]:
    out = []
    for path in _modules():
        layer = path.relative_to(REPO).parts[0]
        for line, name in _imports(path):
            target = name.split(".")[0]
            if target in OURS and target != layer and target not in MAY_IMPORT[layer]:
                out.append((path.relative_to(REPO).as_posix(), line, target, name))
    return out


def test_no_import_runs_up_or_across_the_layers() -> None:
    offences = _offences()
    unexpected = [o for o in offences if (o[0], o[2]) not in KNOWN]
    for file, line, _, name in unexpected:
        print(f"{file}:{line}: imports {name}")
    assert not unexpected, "imports against the layers:\n" + "\n".join(
        f"  {file}:{line}: {file.split('/')[0]} imports {name}"
        for file, line, _, name in unexpected)
    stale = set(KNOWN) - {(o[0], o[2]) for o in offences}
    assert not stale, f"KNOWN lists imports that are gone; remove them: {sorted(stale)}"


def test_the_reader_sees_every_kind_of_import(tmp_path: Path) -> None:
    """The rule is only as good as the import reader: nested, relative and dynamic imports."""
    source = ("import os\nfrom . import sibling\nfrom ..stores import objects\n"
              "def f():\n    from ops.cli import main\n    import importlib\n"
              "    importlib.import_module('gateway.app')\n")
    path = tmp_path / "pipeline" / "asr" / "probe.py"
    path.parent.mkdir(parents=True)
    path.write_text(source)
    found = list(_imports(path, root=tmp_path))
    assert found == [(1, "os"), (2, "pipeline.asr"), (3, "pipeline.stores"), (5, "ops.cli"),
                     (6, "importlib"), (7, "gateway.app")]
