"""What a process loads before it works (docs/performance.md, "Start-up"): ``import podstore``
loads the exception tree and nothing else of podstore; the read commands, on a store already
at the current revision, load neither SQLAlchemy nor Alembic nor protobuf; the lazily loaded
names and commands are the ones the package and ``podstore --help`` promise."""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import click
import pytest
from harness.cli import ENTRY

import podstore
import podstore.checkpoint
from podstore import ContainerAllocateResponse, PodStore
from podstore.cli.main import COMMANDS, cli

#: What only a write (protobuf: a response to parse or build) or a migration (SQLAlchemy,
#: Alembic) needs.
HEAVY = ("sqlalchemy", "alembic", "google.protobuf", "grpc")

#: The write side: the node's sync machinery, imports, exports, the checkpoint encoders.
WRITE_SIDE = (
    "podstore.storage.node.sync",
    "podstore.storage.node.import_dir",
    "podstore.storage.sync",
    "podstore.storage.transfer",
    "podstore.checkpoint.encode",
    "podstore.checkpoint.kinds",
)

#: What a read command may load all the same: `verify` decodes every stored response (that is
#: one of its checks), which takes protobuf when the store holds one.
NEEDS = {"verify": ("google.protobuf",)}
# verify's node-items check rebuilds each stored item as the sync builds it (revision 0008), so
# it reuses the sync's item builder and the checkpoint kinds; no other read command may.
WRITE_SIDE_NEEDS = {"verify": ("podstore.storage.node.sync", "podstore.checkpoint.kinds")}

READ_COMMANDS = [
    ["status"],
    ["pods"],
    ["get", "pod-1"],
    ["devices"],
    ["owners", "GPU-1"],
    ["history"],
    ["usage"],
    ["sql", "SELECT count(*) AS n FROM allocations"],
    ["verify"],
    ["metrics"],
    ["topology"],
]


def _loaded(code: str, *args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run ``code`` with ARGS in a fresh interpreter: its result and every module it had
    imported when it exited (``sys.modules``, written by an exit hook as the last line of
    stderr; ``-X importtime`` would miss what ``importlib.import_module`` loads)."""
    hook = (
        "import atexit, json, sys\n"
        "atexit.register(lambda: print(json.dumps(sorted(sys.modules)), file=sys.stderr))\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", hook + code, *args], capture_output=True, text=True, timeout=120
    )
    lines = run.stderr.strip().splitlines()
    return run, set(json.loads(lines[-1])) if lines else set()


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


def test_import_podstore_loads_only_the_errors() -> None:
    run, modules = _loaded("import podstore")
    assert run.returncode == 0, run.stderr
    assert _heavy(modules) == []
    assert sorted(m for m in modules if m.startswith("podstore")) == ["podstore", "podstore.errors"]
    assert "asyncio" not in modules


@pytest.fixture(scope="module")
def current_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("startup") / "store.db"
    with PodStore.open(db) as store:
        for i in range(3):
            resp = ContainerAllocateResponse(envs={"NVIDIA_VISIBLE_DEVICES": f"GPU-{i}"})
            store.insert(f"pod-{i}", "main", "nvidia.com/gpu", {0: [f"GPU-{i}"]}, resp)
    return db


@pytest.mark.parametrize("args", READ_COMMANDS, ids=lambda a: a[0])
def test_a_read_command_loads_no_sqlalchemy_alembic_or_protobuf(
    current_store: Path, args: list[str]
) -> None:
    run, modules = _loaded(ENTRY[-1], "--db", str(current_store), *args)
    assert run.returncode == 0, run.stderr
    command_modules = {f"podstore.cli.{where.split(':')[0]}" for where in COMMANDS.values()}
    # Its own command module and no other (plus the `checkpoint` helpers `node` reuses).
    own = f"podstore.cli.{COMMANDS[args[0]].split(':')[0]}"
    assert own in modules
    assert modules & command_modules <= {own, "podstore.cli.checkpoint"}
    assert [m for m in _heavy(modules) if not m.startswith(NEEDS.get(args[0], ()))] == []
    allowed = WRITE_SIDE_NEEDS.get(args[0], ())
    assert [m for m in WRITE_SIDE if m in modules and m not in allowed] == []


def test_version_is_the_installed_one() -> None:
    run = subprocess.run([*ENTRY, "--version"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    installed = importlib.metadata.version("podstore")
    assert run.stdout.strip() == f"podstore, version {installed}"
    assert podstore.__version__ == installed
    _, modules = _loaded(ENTRY[-1], "--version")
    # The group and its options, no command, no connection code.
    assert sorted(m for m in modules if m.startswith("podstore.")) == [
        "podstore.cli",
        "podstore.cli.context",
        "podstore.cli.global_options",
        "podstore.cli.main",
        "podstore.errors",
        "podstore.logs",
        "podstore.sqlite",
        "podstore.sqlite.busy",
    ]


def test_help_lists_every_command_and_each_loads_under_its_name() -> None:
    ctx = click.Context(cli)
    assert cli.list_commands(ctx) == sorted(COMMANDS)
    shown = cli.get_help(ctx)
    for name in COMMANDS:
        command = cli.get_command(ctx, name)
        assert command is not None and command.name == name
        assert f"\n  {name} " in shown


def _type_checking_imports(module: ModuleType) -> dict[str, str]:
    """name → module of the imports under ``if TYPE_CHECKING:`` in MODULE's source."""
    assert module.__file__ is not None
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    out: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom) and imp.module is not None
                for alias in imp.names:
                    out[alias.asname or alias.name] = imp.module
    return out


@pytest.mark.parametrize("package", [podstore, podstore.checkpoint], ids=lambda p: p.__name__)
def test_every_public_name_resolves_to_what_type_checkers_see(package: ModuleType) -> None:
    """The lazy table, the imports mypy reads and ``__all__`` name the same things."""
    lazy: dict[str, str] = package._MODULE_OF
    renamed: dict[str, str] = getattr(package, "_RENAMED", {})
    static = _type_checking_imports(package)
    if package is podstore.checkpoint:  # what its own functions use, not re-exported
        del static["values"], static["PodDevicesEntry"]
    assert static == lazy
    eager = {n for n in package.__all__ if n not in lazy}
    for name in eager:  # the errors, __version__, what the package defines itself
        assert name in vars(package), name
    for name, module in lazy.items():
        attribute = renamed.get(name, name)
        assert getattr(package, name) is getattr(importlib.import_module(module), attribute)
    assert set(package.__all__) <= set(dir(package))
    with pytest.raises(AttributeError):
        _ = package.NoSuchName
