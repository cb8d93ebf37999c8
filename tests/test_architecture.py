"""The one-way layer rule of docs/ARCHITECTURE.md, checked over every import (function-level ones included)."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "acn"  # the one import root: every layer below is a package of it (acn.nodes, acn.storage, ...)

# Top to bottom: a module may import its own package, or a package in a layer below its own. The app layer's
# packages may import one another (no cycle, see test_no_import_cycle); every other layer holds one package.
LAYERS: list[set[str]] = [
    {"server", "app", "inspector", "integrations"},
    {"nodes"},
    {"assembly"},
    {"retrieval"},
    {"recording"},
    {"compaction"},
    {"memory"},
    {"editing"},
    {"services"},
    {"storage"},
    {"providers"},
    {"common"},
    {"text"},
]
RANK = {package: rank for rank, packages in enumerate(LAYERS) for package in packages}
# acn/nodes/spec.py (the NodeSpec type) and acn/nodes/__init__.py (the registry) are not nodes.
NODE_SUPPORT = {"acn.nodes", "acn.nodes.spec"}


@cache
def modules() -> dict[str, Path]:
    """Every module of ours by dotted name (tests, benchmarks, examples and deploy files excluded)."""
    found = {"acn.server": PACKAGE / "server.py"}
    for package in RANK:
        for path in (PACKAGE / package).rglob("*.py") if (PACKAGE / package).is_dir() else []:
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def resolve(name: str) -> str | None:
    """Return our module an import names (the longest known prefix), or None for a third-party one."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules():
            return candidate
        parts.pop()
    return None


@cache
def imports(module: str) -> frozenset[str]:
    """Our modules that `module` imports anywhere in its body (also inside functions and TYPE_CHECKING)."""
    path = modules()[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = imported_names(path.read_text(encoding="utf-8"), package)
    return frozenset(target for name in names if (target := resolve(name)) and target != module)


def imported_names(source: str, package: str) -> set[str]:
    """Every dotted name the source imports, `from a import b` giving both a and a.b (b may be a module)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def top(module: str) -> str:
    """The layer package of one of our modules: `acn.storage.repositories.memories` -> `storage`."""
    return module.split(".")[1]


def test_every_package_has_a_layer() -> None:
    packages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert packages <= set(RANK), f"place {sorted(packages - set(RANK))} in LAYERS and docs/ARCHITECTURE.md"


def test_one_import_root() -> None:
    """Nothing of the product is importable beside `acn`: a checkout's top level holds acn/, the thin server.py
    entry point, and the folders that are not installed (tests, benchmarks, examples)."""
    roots = {p.parent.name for p in ROOT.glob("*/__init__.py")} | {p.stem for p in ROOT.glob("*.py")}
    assert roots == {"acn", "server", "tests", "bench"}, f"outside acn/: {sorted(roots - {'acn', 'server', 'tests', 'bench'})}"
    thin = (ROOT / "server.py").read_text(encoding="utf-8")
    assert "from acn.server import create_app, freeze_imports, main" in thin and len(thin.splitlines()) < 30


def test_no_request_reaches_a_benchmark() -> None:
    """The benchmarks write where their command line says (`--out`, a results file) and start servers of other
    checkouts: nothing the server runs imports them, so no request can choose a path they write or a process they
    start."""
    importers = sorted(module for module, path in modules().items()
                       for name in imported_names(path.read_text(encoding="utf-8"), module.rpartition(".")[0])
                       if name == "bench" or name.startswith("bench."))
    assert importers == []


def test_imports_point_down() -> None:
    upward = [f"{module} -> {target}" for module in modules() for target in imports(module)
              if top(target) != top(module) and RANK[top(target)] <= RANK[top(module)]
              and not (RANK[top(target)] == RANK[top(module)] == 0)]
    assert upward == [], "imports that go up or sideways:\n" + "\n".join(sorted(upward))


def test_no_node_imports_another() -> None:
    crossed = [f"{module} -> {target}" for module in modules() if top(module) == "nodes" and module not in NODE_SUPPORT
               for target in imports(module) if top(target) == "nodes" and target not in NODE_SUPPORT]
    assert crossed == [], "node modules importing nodes:\n" + "\n".join(sorted(crossed))


def test_no_import_cycle() -> None:
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> list[str] | None:
        if module in path:
            return [*path[path.index(module):], module]
        if module in done:
            return None
        for target in sorted(imports(module)):
            if cycle := visit(target, [*path, module]):
                return cycle
        done.add(module)
        return None

    for module in sorted(modules()):
        cycle = visit(module, [])
        assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_checker_sees_every_kind_of_import() -> None:
    """Function-level, TYPE_CHECKING and relative imports are dependencies too: the walk must see them."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "import acn.common.errors\n"
        "if TYPE_CHECKING:\n    from acn.storage.repositories.memories import MemoryRepository\n"
        "def later():\n    from acn.nodes import spec\n"
        "from .lines import render_memories\n"
    )
    names = imported_names(source, "acn.memory")
    expected = {"acn.common.errors", "acn.storage.repositories.memories", "acn.nodes.spec", "acn.memory.lines"}
    assert expected | {"acn.nodes"} <= names
    assert {resolve(n) for n in names} >= expected


def test_architecture_document_places_every_package() -> None:
    document = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    missing = [package for package in RANK
               if f"`acn/{package}/`" not in document and f"`acn/{package}.py`" not in document]
    assert missing == [], f"docs/ARCHITECTURE.md does not place {missing}"


# The store's expression language is storage's own (issue 30): above storage, a read is a named query of
# acn/storage/repositories/memory_queries.py or a repository method, never a Filter or a filter builder.
STORE_EXPRESSIONS = {"acn.storage.database.base.Filter", "acn.storage.database.memory_rows.id_range",
                     "acn.storage.database.memory_rows.EMBEDDED", "acn.storage.database.Filter",
                     "acn.storage.database.EMBEDDED"}
PRIMITIVE_READS = {"find", "page", "count", "query_all", "search"}


def store_expressions_used(module: str) -> list[str]:
    """What `module` takes of the store's query language: Filter, a *_filter builder, a primitive repository read
    (memories.find(...), ...) or a raw store query."""
    tree = ast.parse(modules()[module].read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("acn.storage"):
            found += [f"import {node.module}.{a.name}" for a in node.names
                      if f"{node.module}.{a.name}" in STORE_EXPRESSIONS or a.name.endswith("_filter")]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            receiver = ast.unparse(node.func.value)
            if node.func.attr in PRIMITIVE_READS and receiver.endswith(("memories", "memory_repository")):
                found.append(f"{receiver}.{node.func.attr}(...)")
            if node.func.attr in {"query", "search_text", "search_dense"} and receiver.endswith(".store"):
                found.append(f"{receiver}.{node.func.attr}(...)")
    return found


def test_store_expressions_stay_inside_storage() -> None:
    leaks = [f"{module}: {use}" for module in modules() if top(module) != "storage"
             for use in store_expressions_used(module)]
    assert leaks == [], "write a named query in acn/storage/repositories/memory_queries.py instead:\n" + "\n".join(leaks)


def test_the_store_expression_rule_sees_a_leak(tmp_path: Path) -> None:
    leaky = tmp_path / "leaky.py"
    leaky.write_text("from acn.storage.database.base import Filter\nfrom acn.storage.database.memory_rows import scope_filter\n"
                     "def f(deps, ns):\n    return deps.memories.find('t', Filter('valid_to > 0'), limit=1)\n"
                     "def g(runtime):\n    return runtime.memories.store.query('c', None, fields=[], limit=1)\n")
    modules()["acn.nodes.leaky"] = leaky
    try:
        assert store_expressions_used("acn.nodes.leaky") == [
            "import acn.storage.database.base.Filter", "import acn.storage.database.memory_rows.scope_filter",
            "deps.memories.find(...)", "runtime.memories.store.query(...)"]
    finally:
        del modules()["acn.nodes.leaky"]


# What a turn is and a session's state are said once (acn/common/conversation.py); a module names these shapes by
# importing them from there, never by defining its own or reaching into storage for them.
CONVERSATION_SHAPES = {"Turn", "SessionState", "VersionInfo", "group_turns", "protected_start", "number_messages"}


def conversation_shapes_defined_or_taken_elsewhere(module: str) -> list[str]:
    """Where `module` defines one of the conversation's shapes, or imports one from a module other than its home."""
    tree = ast.parse(modules()[module].read_text(encoding="utf-8"))
    found = [f"defines {node.name}" for node in tree.body
             if isinstance(node, ast.ClassDef | ast.FunctionDef) and node.name in CONVERSATION_SHAPES]
    found += [f"imports {alias.name} from {node.module}" for node in ast.walk(tree)
              if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("acn.")
              and node.module != "acn.common.conversation"
              for alias in node.names if alias.name in CONVERSATION_SHAPES]
    return found


def test_the_conversations_shapes_have_one_home() -> None:
    strays = [f"{module}: {what}" for module in modules() if module != "acn.common.conversation"
              for what in conversation_shapes_defined_or_taken_elsewhere(module)]
    assert strays == [], "take these from acn.common.conversation:\n" + "\n".join(strays)


def test_the_one_home_rule_sees_a_stray(tmp_path: Path) -> None:
    stray = tmp_path / "stray.py"
    stray.write_text("from acn.storage.repositories.sessions import SessionState\n\nclass Turn:\n    pass\n")
    modules()["acn.nodes.stray"] = stray
    try:
        assert conversation_shapes_defined_or_taken_elsewhere("acn.nodes.stray") == [
            "defines Turn", "imports SessionState from acn.storage.repositories.sessions"]
    finally:
        del modules()["acn.nodes.stray"]


def test_the_platform_packages_import_nothing_of_ours() -> None:
    """integrations/ (the Dify and Coze packages) is a project beside the product: it talks to the server over HTTP."""
    leaks = {path.relative_to(ROOT).as_posix(): sorted(name for name in imported_names(path.read_text(encoding="utf-8"), "")
                                                        if name == "acn" or name.startswith("acn."))
             for path in sorted((ROOT / "integrations").rglob("*.py"))}
    assert leaks and {path: names for path, names in leaks.items() if names} == {}
