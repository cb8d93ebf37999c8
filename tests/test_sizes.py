"""Size limits of issue 51, kept by a test: no module of acn/ over 450 lines, no class with more than 20 public methods.

A public method is a function defined in the class body whose name does not start with `_` (properties, class and
static methods count), together with those it inherits from our own classes (found by name across acn/); what a
class inherits from a library (pydantic's BaseModel, threading.Thread) does not count.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "acn"
MAX_MODULE_LINES = 450
MAX_PUBLIC_METHODS = 20

# acn/storage/ is split into its three rooms (issue 51) and within the limits: nothing is allowed over them, and an
# entry added here that does not exceed its limit fails test_the_allow_list_names_only_what_is_over.
ALLOWED_MODULES: set[str] = set()
ALLOWED_CLASSES: set[str] = set()


def module_lines(source: str) -> int:
    """Return the module's length as an editor shows it."""
    return len(source.splitlines())


def own_public_methods(node: ast.ClassDef) -> set[str]:
    """Return the public methods defined in the class body itself."""
    return {item.name for item in node.body
            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and not item.name.startswith("_")}


def base_names(node: ast.ClassDef) -> list[str]:
    """Return the simple names of the class's bases (`a.B` gives `B`)."""
    names = []
    for base in node.bases:
        if isinstance(base, ast.Subscript):  # Generic[T], Base[T]
            base = base.value
        if isinstance(base, ast.Name):
            names.append(base.id)
        elif isinstance(base, ast.Attribute):
            names.append(base.attr)
    return names


def public_methods(classes: dict[str, ast.ClassDef], name: str, seen: frozenset[str] = frozenset()) -> set[str]:
    """Return the public methods of class `name`: its own and those of its bases among `classes`."""
    node = classes[name]
    methods = own_public_methods(node)
    for base in base_names(node):
        if base in classes and base not in seen and base != name:
            methods |= public_methods(classes, base, seen | {name})
    return methods


@cache
def sources() -> dict[str, str]:
    """Every module of acn/ by its path from the checkout."""
    return {path.relative_to(ROOT).as_posix(): path.read_text(encoding="utf-8")
            for path in sorted(PACKAGE.rglob("*.py"))}


def class_sizes(modules: dict[str, str]) -> dict[str, int]:
    """Return `path:Class` -> public methods, for every class of `modules`."""
    trees = {path: ast.parse(source) for path, source in modules.items()}
    located = [(path, node) for path, tree in trees.items() for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
    # Resolved by name: two of our classes sharing a name would merge their methods here, so none may (below).
    classes = {node.name: node for _, node in located}
    return {f"{path}:{node.name}": len(public_methods(classes, node.name)) for path, node in located}


def test_no_module_over_the_limit() -> None:
    over = {path: module_lines(source) for path, source in sources().items()
            if module_lines(source) > MAX_MODULE_LINES and path not in ALLOWED_MODULES}
    assert over == {}, f"split these modules (at most {MAX_MODULE_LINES} lines)"


def test_no_class_over_the_limit() -> None:
    over = {name: count for name, count in class_sizes(sources()).items()
            if count > MAX_PUBLIC_METHODS and name not in ALLOWED_CLASSES}
    assert over == {}, f"give these classes a narrower face (at most {MAX_PUBLIC_METHODS} public methods)"


def test_the_allow_list_names_only_what_is_over_and_only_in_storage() -> None:
    assert all(name.startswith("acn/storage/") for name in ALLOWED_MODULES | ALLOWED_CLASSES)
    modules = sources()
    assert {path for path in ALLOWED_MODULES if module_lines(modules[path]) > MAX_MODULE_LINES} == ALLOWED_MODULES
    sizes = class_sizes(modules)
    assert {name for name in ALLOWED_CLASSES if sizes[name] > MAX_PUBLIC_METHODS} == ALLOWED_CLASSES


def test_class_names_are_unique_where_methods_are_inherited() -> None:
    """The inheritance walk finds bases by name: a base class name used twice in acn/ would blur the count."""
    trees = [ast.parse(source) for source in sources().values()]
    defined = [node.name for tree in trees for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
    bases = {base for tree in trees for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
             for base in base_names(node)}
    assert sorted(name for name in set(defined) & bases if defined.count(name) > 1) == []


def test_the_counts_see_a_module_and_a_class_over_the_limit() -> None:
    methods = "".join(f"    def m{index}(self) -> None: ...\n" for index in range(12))
    source = ("class Base:\n" + methods + "    def _private(self) -> None: ...\n\n"
              "class Wide(Base):\n" + methods.replace("def m", "def n") + "    @property\n    def p(self) -> int: ...\n")
    assert class_sizes({"x.py": source}) == {"x.py:Base": 12, "x.py:Wide": 25}
    assert module_lines("a\n" * (MAX_MODULE_LINES + 1)) == MAX_MODULE_LINES + 1
