"""The package's layout holds: no import circle, and lower layers never import higher ones.

Layers, bottom up (docs/design.md): errors/types/fsutil and deviceplugin; pure; checkpoint;
sqlite; storage; store; the public face and the optional features over it (watch, metrics,
fleet); cli. An import is read from the source (module level and inside functions alike), so a
lazy import cannot hide a circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import podstore

PACKAGE = Path(podstore.__file__).parent

# Module prefix → layer; a module may import only its own layer or lower ones.
LAYERS = {
    "podstore.errors": 0,
    "podstore.types": 0,
    "podstore.fsutil": 0,
    "podstore.deviceplugin": 0,
    "podstore.criapi": 0,
    "podstore.pure": 1,
    "podstore.checkpoint": 2,
    "podstore.sqlite": 3,
    "podstore.storage": 4,
    "podstore.store": 5,
    "podstore.reading": 5,  # the facade's streaming reads (PodStore.reader)
    "podstore": 6,  # the package's __init__: the public face
    # Optional features over the facade (import podstore never loads them).
    "podstore.watch": 6,
    "podstore.metrics": 6,
    # The fleet (central PostgreSQL) sits above the facade, beside the public face: it uses
    # store.py and storage/, and only cli/ imports it (lazily, inside its commands).
    "podstore.fleet": 6,
    "podstore.cli": 7,
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in PACKAGE.rglob("*.py") if "_pb2" not in p.name}


def _resolve(target: str) -> str | None:
    """The package module an import names (a submodule if one exists, else its package)."""
    while target:
        if target in MODULES:
            return target
        target = target.rpartition(".")[0]
    return None


def _imports(name: str) -> set[str]:
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from podstore.x import y` may name a submodule y or an attribute of x.
            targets = [f"{node.module}.{a.name}" for a in node.names]
        for target in targets:
            if target.startswith("podstore"):
                resolved = _resolve(target)
                if resolved is not None and resolved != name:
                    out.add(resolved)
    return out


GRAPH = {name: _imports(name) for name in MODULES}


def _layer(name: str) -> int:
    best = max((p for p in LAYERS if name == p or name.startswith(p + ".")), key=len)
    return LAYERS[best]


def test_the_graph_was_read() -> None:
    assert "podstore.store" in GRAPH and "podstore.storage.entries" in GRAPH["podstore.store"]
    assert GRAPH.get("podstore.cli.main")


def test_no_import_circle() -> None:
    done: set[str] = set()
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(GRAPH[node]):
            if nxt in on_stack:
                circles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in done:
                visit(nxt)
        stack.pop()
        on_stack.discard(node)
        done.add(node)

    for name in sorted(GRAPH):
        if name not in done:
            visit(name)
    assert circles == []


def test_no_layer_imports_a_higher_one() -> None:
    upward = [
        f"{name} -> {target}"
        for name, targets in sorted(GRAPH.items())
        for target in sorted(targets)
        if _layer(target) > _layer(name)
    ]
    assert upward == []


def test_only_the_commands_and_the_watch_wiring_import_the_fleet() -> None:
    importers = sorted(
        n
        for n, t in GRAPH.items()
        if any(x.startswith("podstore.fleet") for x in t) and not n.startswith("podstore.fleet")
    )
    # The watch wiring imports it only inside the --ship-to path.
    assert importers == ["podstore.cli.fleet", "podstore.cli.ship", "podstore.watch.run"]


def test_no_command_module_imports_the_command_group() -> None:
    importers = [n for n, t in GRAPH.items() if "podstore.cli.main" in t and n != "podstore.cli"]
    assert importers == []
