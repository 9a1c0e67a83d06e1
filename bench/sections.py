"""The bench's sections: a small registry, so that ``python -m bench --only NAME`` can run one
and other benchmark modules can add theirs.

A *per-size* section runs once for each workload size on that size's prepared state (a
:class:`bench.runner.SizeRun`) and writes into its result dict; a *global* section runs once
per bench run (the 100,000-entry fixture, or another module's own benchmark) and returns a
JSON-ready dict stored under ``results["sections"][name]``.

Adding a benchmark: write ``bench/<name>.py`` with a function ``run(ctx) -> dict`` (``ctx`` is
a :class:`RunContext`) and one ``render(result) -> str`` for its part of latest.md (with its
targets' verdicts), call ``register(Section(name, "what it measures", run=run, render=...))``
at import, and add the module name to :data:`EXTENSIONS`. ``python -m bench --only <name>`` then
runs it alone.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_harness(name: str) -> Any:
    """tests/harness/NAME.py, loaded from its path: a section starts its servers and builds
    its workload the way the tests do, without putting the test support package on everyone's
    import path."""
    path = os.path.join(_REPO, "tests", "harness", f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"bench_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


#: Modules that register sections of their own; a missing one is skipped.
EXTENSIONS: tuple[str, ...] = (
    "bench.watch",
    "bench.fleet",
    "bench.nodefiles",
    "bench.nodestate",
    "bench.startup",
    "bench.loopstall",
    "bench.attribution",
)


@dataclass(frozen=True, slots=True)
class RunContext:
    """What a global section gets: the run's configuration, a scratch directory, a logger."""

    cfg: Any  # bench.runner.Config
    workdir: str
    log: Callable[[str], None]


@dataclass(frozen=True, slots=True)
class Section:
    name: str
    help: str
    #: per-size sections: called with the SizeRun; global ones: with a RunContext.
    run: Callable[[Any], Any]
    per_size: bool = False
    #: global sections of other modules: their part of latest.md, from what ``run`` returned.
    render: Callable[[dict[str, Any]], str] | None = None


SECTIONS: dict[str, Section] = {}


def register(section: Section) -> Section:
    SECTIONS[section.name] = section
    return section


def load_extensions() -> None:
    for name in EXTENSIONS:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise


def rendered(results: dict[str, Any]) -> str:
    """The latest.md text of every global section that renders itself ('' when none ran)."""
    parts = []
    for name, out in results.get("sections", {}).items():
        section = SECTIONS.get(name)
        if section is not None and section.render is not None and out:
            parts.append(section.render(out))
    return "".join(parts)


def selected(only: tuple[str, ...] | None) -> list[Section]:
    """The sections to run, in registration order (all of them without ``only``)."""
    if not only:
        return list(SECTIONS.values())
    unknown = [n for n in only if n not in SECTIONS]
    if unknown:
        raise SystemExit(
            f"python -m bench: unknown section(s) {', '.join(unknown)}; "
            f"known: {', '.join(SECTIONS)}"
        )
    return [s for s in SECTIONS.values() if s.name in only]
