"""Storage's three rooms (docs/ARCHITECTURE.md, "Storage's rooms"): each entered by its door, none too large.

- Nothing outside acn/storage imports a storage module but a door: `acn.storage.database`, `acn.storage.repositories`
  or `acn.storage.process` (their `__init__`).
- A room imports another room only through its door, and only downwards: process, then repositories, then database.
- No module of acn/storage is over MAX_MODULE_LINES lines and no class of it has over MAX_PUBLIC_METHODS public
  methods (its own and those it inherits from our classes, properties counted: as tests/test_sizes.py counts).
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

from tests.test_architecture import imported_names, modules, resolve

ROOT = Path(__file__).resolve().parent.parent
STORAGE = ROOT / "acn" / "storage"
ROOMS = ["process", "repositories", "database"]  # top to bottom
DOORS = {f"acn.storage.{room}" for room in ROOMS}
MAX_MODULE_LINES = 450
MAX_PUBLIC_METHODS = 20


def room_of(module: str) -> str | None:
    """The room of a storage module (`acn.storage.database.lite.read_cache` -> `database`), None outside storage."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["acn", "storage"] else None


def storage_imports(module: str, path: Path) -> set[str]:
    """The storage modules (or door names) that `module` imports anywhere in its body."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for name in imported_names(path.read_text(encoding="utf-8"), package):
        target = resolve(name)
        if target is not None and target.startswith("acn.storage") and target != module:
            found.add(target)
    return found


def door_breaches(module: str, path: Path) -> list[str]:
    """What `module` imports of storage that it may not: past a door, or up the rooms."""
    mine = room_of(module)
    breaches = []
    for target in sorted(storage_imports(module, path)):
        room = room_of(target)
        if room == mine or target == "acn.storage":
            continue
        if room not in ROOMS:
            breaches.append(f"{module} imports {target}, which is in no room")
        elif target not in DOORS:
            breaches.append(f"{module} imports {target} past the door of {room}")
        elif mine is not None and ROOMS.index(room) < ROOMS.index(mine):
            breaches.append(f"{module} ({mine}) imports up into {room}")
    return breaches


def test_every_storage_module_is_in_a_room() -> None:
    strays = [module for module in modules() if module.startswith("acn.storage.") and room_of(module) not in ROOMS]
    assert strays == []


def test_storage_is_entered_by_its_doors_and_rooms_point_down() -> None:
    breaches = [breach for module, path in modules().items() for breach in door_breaches(module, path)]
    assert breaches == [], "\n".join(breaches)


def test_the_door_rule_sees_a_breach(tmp_path: Path) -> None:
    leaky = tmp_path / "leaky.py"
    leaky.write_text("from acn.storage.database.lite.read_cache import Stamp\nfrom acn.storage.repositories import "
                     "MemoryRepository\n\ndef f():\n    from acn.storage.process.allocator import trim_free_memory\n")
    assert door_breaches("acn.memory.leaky", leaky) == [
        "acn.memory.leaky imports acn.storage.database.lite.read_cache past the door of database",
        "acn.memory.leaky imports acn.storage.process.allocator past the door of process"]
    upward = tmp_path / "upward.py"
    upward.write_text("from acn.storage.process import EmbeddingBacklog\n")
    assert door_breaches("acn.storage.database.upward", upward) == [
        "acn.storage.database.upward (database) imports up into process"]


def test_no_storage_module_is_over_the_size_limit() -> None:
    sizes = {path.relative_to(ROOT).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
             for path in STORAGE.rglob("*.py")}
    assert {path: lines for path, lines in sizes.items() if lines > MAX_MODULE_LINES} == {}


def public_methods(cls: type) -> set[str]:
    """The public methods of a class: its own and those of its bases that are ours (acn.*), properties too."""
    names = set()
    for klass in cls.__mro__:
        if not klass.__module__.startswith("acn."):
            continue
        for name, value in vars(klass).items():
            if not name.startswith("_") and (inspect.isfunction(value)
                                               or isinstance(value, classmethod | staticmethod | property)):
                names.add(name)
    return names


def storage_classes() -> dict[str, type]:
    """Every class defined in a module of acn/storage, by dotted name."""
    found = {}
    for path in sorted(STORAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        module = importlib.import_module(name)
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef):
                found[f"{name}.{node.name}"] = getattr(module, node.name)
    return found


def test_no_storage_class_has_too_many_public_methods() -> None:
    counts = {name: len(public_methods(cls)) for name, cls in storage_classes().items()}
    assert {name: count for name, count in counts.items() if count > MAX_PUBLIC_METHODS} == {}


def test_the_method_count_takes_inherited_methods_and_properties() -> None:
    from acn.storage.database import MemoryStore, MilvusStore

    assert {"ensure", "search_text", "insert"} <= public_methods(MemoryStore)
    assert {"partial_updates", "insert", "collection_names"} <= public_methods(MilvusStore)


# Who may open which door: the wiring (the app layer, the services' Deps) any; pipelines, nodes and the inspector only
# the repositories' (they never see the store, its rows or the process parts).
WIRING = ("acn.server", "acn.app", "acn.services", "acn.integrations")


def test_pipelines_open_only_the_repositories_door() -> None:
    opened = [f"{module} imports {target}" for module, path in modules().items()
              if room_of(module) is None and not module.startswith(WIRING)
              for target in sorted(storage_imports(module, path)) if target != "acn.storage.repositories"]
    assert opened == [], "\n".join(opened)
