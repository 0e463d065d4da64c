"""The package's import graph keeps its layers: no circle, no arrow that runs back up.

Read from the source (every ``import`` and ``from ... import``, those inside functions included),
not by importing anything.  The layers, lowest first, are the README's: core, storage,
conversion, engines, testing, clusters, commands, then the public faces (``tfrecord_io.spark``,
``tfrecord_io.beam``, the package itself).  The README's layout block names every module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from helpers import REPO

PACKAGE = REPO / "tfrecord_io"
LAYERS = ["core", "storage", "conversion", "engines", "testing", "clusters", "commands"]
FACES = {"tfrecord_io", "tfrecord_io.spark", "tfrecord_io.beam", "tfrecord_io.schemas"}
ENGINES = ("pyspark", "apache_beam", "tensorflow", "keras")


def _modules() -> dict[str, Path]:
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


MODULES = _modules()


def _imports(module: str, path: Path) -> list[tuple[str, int]]:
    """(imported name, line) for every import in ``path``; relative imports resolved."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            found += [(f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base, node.lineno) for a in node.names]
    return found


def _own(name: str) -> str | None:
    """The package module ``name`` is, or is in (None: not ours)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _layer(module: str) -> int:
    if module in FACES:
        return len(LAYERS)
    return LAYERS.index(module.split(".")[1])


EDGES = {m: {(_own(n), line) for n, line in _imports(m, p) if _own(n) not in (None, m)} for m, p in MODULES.items()}


def test_every_module_is_in_a_layer():
    assert not [m for m in MODULES if m not in FACES and m.split(".")[1] not in LAYERS]


def test_no_import_runs_back_up():
    up = [f"{m}:{line} imports {d}" for m, deps in EDGES.items() for d, line in deps if _layer(d) > _layer(m)]
    assert not up, "imports from a higher layer:\n" + "\n".join(sorted(up))


def test_no_circles():
    graph = {m: {d for d, _ in deps} for m, deps in EDGES.items()}
    circles = []

    def visit(m, path, on_path, done):
        on_path.add(m)
        path.append(m)
        for d in sorted(graph[m]):
            if d in on_path:
                circles.append(" -> ".join(path[path.index(d):] + [d]))
            elif d not in done:
                visit(d, path, on_path, done)
        path.pop()
        on_path.discard(m)
        done.add(m)

    done: set[str] = set()
    for m in sorted(graph):
        if m not in done:
            visit(m, [], set(), done)
    assert not circles, "import circles:\n" + "\n".join(circles)


@pytest.mark.parametrize("layer", ["core", "storage", "conversion"])
def test_the_layers_below_the_engines_import_no_engine(layer):
    found = [f"{m}:{line} imports {n}" for m, p in MODULES.items() if m.split(".")[1:2] == [layer]
             for n, line in _imports(m, p) if n.split(".")[0] in ENGINES]
    assert not found, "\n".join(found)


def test_the_readme_layout_names_every_module():
    readme = (REPO / "README.md").read_text()
    block = readme.split("## Layout", 1)[1].split("```", 2)[1]
    names = {m.rsplit(".", 1)[-1] for m in MODULES if m.count(".") >= 2 and not m.endswith("__init__")}
    names |= {m.split(".")[1] for m in MODULES if m.count(".") >= 1}
    missing = sorted(n for n in names if n not in block and n.replace("_", "-") not in block)
    assert not missing, f"modules the README's layout does not name: {missing}"
