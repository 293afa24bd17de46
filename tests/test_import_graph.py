"""Import-graph check (issue 19): no import loop inside the installed ``accel`` package, counting
function-level imports, and no import of another module's private name.

The modules are read with ``ast`` and never imported (some import Triton or CuTeDSL). The package is found
through ``import accel`` and the ``__path__`` of ``accel``, ``accel.kernels`` and ``accel.backends``, since the
two subpackages live in other folders than ``accel/`` in a checkout (pyproject's package-dir).

Rules the checker applies:

* Every ``import x`` / ``from x import y`` anywhere in a file counts: module level, inside functions and
  methods, inside ``try`` blocks. A constant-string ``importlib.import_module("accel.x")`` counts too.
* ``import a.b.c`` gives an edge to ``a.b.c``. ``from P import n`` gives an edge to ``P.n`` when ``P.n`` is a
  module of the tree, else to ``P`` (``n`` is then a name defined in ``P``). The parent packages Python runs
  implicitly before a module (``P/__init__`` for ``P.n``, a child's own parents) are not edges: counting
  them would make every package a loop.
* Imports under ``if TYPE_CHECKING:`` are left out of the loop check: they never execute. They still count
  for the private-name check.
* Private name: ``from M import _x`` (``M`` inside accel, ``M`` not the importer, ``M._x`` not a submodule)
  or ``M._x`` read/written through a name bound to an imported accel module. Private MODULES
  (``from accel.kernels import _tuning``, ``import accel._compat``) are fine: that is package structure.
  Dunder names are fine. The rule is strict: a package's own submodules' private names are violations too.
"""

from __future__ import annotations

import ast
import os
import textwrap
from collections import deque
from typing import NamedTuple

import pytest

# (importer, module, name) -> reason. Empty by default; every entry needs a reason that says why the
# private name cannot be made public or reached through a public one. Stale entries fail the test.
ALLOWED_PRIVATE: dict[tuple[str, str, str], str] = {}

FIX_PRIVATE = "import the defining module's public name, or make the name public"
FIX_LOOP = ("break the loop: move the shared code into a module both sides import, or pass it in; "
            "a function-level import still counts")


class Import(NamedTuple):
    """One import statement's resolved target inside the tree."""

    target: str  # the module the import runs (dotted, packages are their __init__)
    name: str | None  # the name taken from it (``from target import name``), None for ``import target``
    lineno: int
    typing_only: bool  # under ``if TYPE_CHECKING:``: never executes
    scope: str  # "module level" or "in <function>"


class PrivateUse(NamedTuple):
    importer: str
    path: str
    lineno: int
    module: str
    name: str
    how: str  # "from-import" or "attribute"

    def message(self) -> str:
        what = (f"from {self.module} import {self.name}" if self.how == "from-import"
                else f"{self.module}.{self.name} (attribute of an imported module)")
        return (f"{_shown(self.path)}:{self.lineno}: {self.importer} uses private name {self.name!r} of "
                f"{self.module}: {what} -- {FIX_PRIVATE}")


# ---------------------------------------------------------------------------------------------- walk


def installed_roots() -> list[tuple[str, str]]:
    """(package name, folder) for the installed accel and its two relocated subpackages."""
    import accel
    import accel.backends
    import accel.kernels

    roots = []
    for package in (accel, accel.kernels, accel.backends):
        roots += [(package.__name__, os.path.abspath(p)) for p in package.__path__]
    return roots


def walk(roots: list[tuple[str, str]]) -> dict[str, str]:
    """{dotted module name: file path} for every ``.py`` under each (package name, folder) root.

    A subfolder is a subpackage only when it has an ``__init__.py``; a package is its ``__init__``."""
    modules: dict[str, str] = {}
    for package, folder in roots:
        for here, dirs, files in os.walk(folder):
            dirs[:] = sorted(d for d in dirs if os.path.isfile(os.path.join(here, d, "__init__.py")))
            rel = os.path.relpath(here, folder)
            prefix = package if rel == "." else package + "." + rel.replace(os.sep, ".")
            for file in sorted(files):
                if not file.endswith(".py"):
                    continue
                name = prefix if file == "__init__.py" else f"{prefix}.{file[:-3]}"
                modules.setdefault(name, os.path.join(here, file))
    return modules


# ------------------------------------------------------------------------------------------- imports


def _package_of(module: str, path: str) -> str:
    return module if os.path.basename(path) == "__init__.py" else module.rpartition(".")[0]


def _resolve_from(module: str, path: str, node: ast.ImportFrom) -> str | None:
    """The absolute module a ``from ... import`` names, or None for a relative import above the top."""
    if not node.level:
        return node.module
    parts = _package_of(module, path).split(".")
    if node.level - 1 >= len(parts):
        return None
    base = parts[: len(parts) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _known_prefix(name: str, known) -> str | None:
    """The longest dotted prefix of ``name`` that is a module of the tree."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        candidate = ".".join(parts[:i])
        if candidate in known:
            return candidate
    return None


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


class _Collector(ast.NodeVisitor):
    def __init__(self, module: str, path: str, known):
        self.module, self.path, self.known = module, path, known
        self.found: list[Import] = []
        self.bindings: dict[str, set[str]] = {}  # local name -> accel modules it is bound to by an import
        self.from_names: list[tuple[str, str, int]] = []  # (module, name, lineno) of ``from M import name``
        self._typing = False
        self._scope: list[str] = []

    def _add(self, target: str, name: str | None, lineno: int) -> None:
        scope = f"in {'.'.join(self._scope)}()" if self._scope else "module level"
        self.found.append(Import(target, name, lineno, self._typing, scope))

    def _bind(self, local: str, target: str) -> None:
        self.bindings.setdefault(local, set()).add(target)

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            self.visit(node.test)
            outer, self._typing = self._typing, True
            for child in node.body:
                self.visit(child)
            self._typing = outer
            for child in node.orelse:  # the else branch runs
                self.visit(child)
        else:
            self.generic_visit(node)

    def _visit_scope(self, node) -> None:
        self._scope.append(node.name)
        self.generic_visit(node)
        self._scope.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _visit_scope

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            target = _known_prefix(alias.name, self.known)
            if target is None:
                continue
            self._add(target, None, node.lineno)
            if alias.asname:
                self._bind(alias.asname, target)
            else:  # ``import a.b.c`` binds ``a``
                top = alias.name.split(".")[0]
                if top in self.known:
                    self._bind(top, top)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = _resolve_from(self.module, self.path, node)
        if base is None or base == "__future__":
            return
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            if alias.name != "*" and sub in self.known:  # a submodule: the edge goes to it
                self._add(sub, alias.name, node.lineno)
                self._bind(alias.asname or alias.name, sub)
                continue
            target = _known_prefix(base, self.known)
            if target is None:
                continue
            self._add(target, alias.name, node.lineno)
            if target == base and alias.name != "*":
                self.from_names.append((base, alias.name, node.lineno))

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if (isinstance(func, (ast.Attribute, ast.Name))
                and (func.attr if isinstance(func, ast.Attribute) else func.id) == "import_module"
                and node.args and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str) and not node.args[0].value.startswith(".")):
            target = _known_prefix(node.args[0].value, self.known)
            if target is not None:
                self._add(target, None, node.lineno)
        self.generic_visit(node)


def _collect(module: str, path: str, known) -> tuple[_Collector, ast.Module]:
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
    collector = _Collector(module, path, known)
    collector.visit(tree)
    return collector, tree


def imports(module: str, path: str, known) -> list[Import]:
    """Every import in ``path`` (module ``module``) whose target is a module in ``known``:
    ``Import(target, name, lineno, typing_only, scope)``, in source order."""
    return _collect(module, path, known)[0].found


def graph(modules: dict[str, str]) -> dict[str, dict[str, list[Import]]]:
    """{importer: {imported module: [the imports that run it]}}; ``TYPE_CHECKING`` imports left out."""
    edges: dict[str, dict[str, list[Import]]] = {m: {} for m in modules}
    for module, path in sorted(modules.items()):
        for imp in imports(module, path, modules):
            if not imp.typing_only:
                edges[module].setdefault(imp.target, []).append(imp)
    return edges


# -------------------------------------------------------------------------------------------- cycles


def _sccs(edges: dict[str, dict[str, list[Import]]]) -> list[list[str]]:
    """Tarjan's strongly connected components, iterative, deterministic (sorted)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    out.append(sorted(component))
    return sorted(out)


def cycles(edges: dict[str, dict[str, list[Import]]]) -> list[list[str]]:
    """Import loops as module lists ``[a, b, ..., a]``: for every edge inside a strongly connected component
    of size > 1 (or a self-edge), the shortest loop through that edge. Every edge that takes part in a loop
    appears in at least one listed loop. Sorted, each loop rotated to start at its smallest module."""
    found: set[tuple[str, ...]] = set()
    for component in _sccs(edges):
        members = set(component)
        if len(component) == 1 and component[0] not in edges.get(component[0], {}):
            continue
        for u in component:
            for v in sorted(edges[u]):
                if v not in members:
                    continue
                path = _shortest(edges, v, u, members)  # v ... u
                loop = [u] + path  # u -> v -> ... -> u
                ring = loop[:-1]
                start = ring.index(min(ring))
                ring = ring[start:] + ring[:start]
                found.add(tuple(ring + [ring[0]]))
    return [list(loop) for loop in sorted(found, key=lambda c: (len(c), c))]


def _shortest(edges, source: str, goal: str, members: set[str]) -> list[str]:
    if source == goal:
        return [goal]
    previous = {source: None}
    queue = deque([source])
    while queue:
        node = queue.popleft()
        for child in sorted(edges[node]):
            if child in members and child not in previous:
                previous[child] = node
                if child == goal:
                    path = [child]
                    while previous[path[-1]] is not None:
                        path.append(previous[path[-1]])
                    return path[::-1]
                queue.append(child)
    raise AssertionError(f"{goal} not reachable from {source} inside its component")  # pragma: no cover


def _shown(path: str) -> str:
    """``path`` relative to the working folder when under it (shorter messages), else as is."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def _statement(target: str, names: list[str | None]) -> str:
    if names == [None]:
        return f"import {target}"
    if len(names) == 1 and target.endswith(f".{names[0]}"):  # the submodule itself
        return f"from {target.rpartition('.')[0]} import {names[0]}"
    return f"from {target} import {', '.join(str(n) for n in names)}"


def describe_cycle(loop: list[str], edges, modules: dict[str, str]) -> str:
    """The loop on one line, then file:line, scope and statement of every import that makes each hop."""
    lines = ["  " + " -> ".join(loop)]
    for a, b in zip(loop, loop[1:]):
        by_line: dict[tuple[int, str], list[str | None]] = {}
        for imp in edges[a][b]:
            by_line.setdefault((imp.lineno, imp.scope), []).append(imp.name)
        for (lineno, scope), names in sorted(by_line.items()):
            lines.append(f"      {_shown(modules[a])}:{lineno}: {a} -> {b} ({_statement(b, names)}, {scope})")
    return "\n".join(lines)


# -------------------------------------------------------------------------------------- private uses


def _attribute_module(node: ast.expr, bindings: dict[str, set[str]], known) -> set[str]:
    """The accel modules an expression (``name`` or ``name.sub.sub``) may be, through import bindings."""
    if isinstance(node, ast.Name):
        return bindings.get(node.id, set())
    if isinstance(node, ast.Attribute):
        return {f"{m}.{node.attr}" for m in _attribute_module(node.value, bindings, known)
                if f"{m}.{node.attr}" in known}
    return set()


def private_uses(modules: dict[str, str]) -> list[PrivateUse]:
    """Every use of another accel module's private name: ``from M import _x`` and ``M._x`` attributes."""
    found: list[PrivateUse] = []
    for module, path in sorted(modules.items()):
        collector, tree = _collect(module, path, modules)
        for target, name, lineno in collector.from_names:
            if _is_private(name) and target != module and f"{target}.{name}" not in modules:
                found.append(PrivateUse(module, path, lineno, target, name, "from-import"))
        if not collector.bindings:
            continue
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and _is_private(node.attr)):
                continue
            for target in sorted(_attribute_module(node.value, collector.bindings, modules)):
                if target != module and f"{target}.{node.attr}" not in modules:
                    found.append(PrivateUse(module, path, node.lineno, target, node.attr, "attribute"))
    return sorted(set(found), key=lambda u: (u.path, u.lineno, u.module, u.name))


# --------------------------------------------------------------------------------------------- tests


@pytest.fixture(scope="module")
def installed() -> dict[str, str]:
    return walk(installed_roots())


def test_walk_finds_the_installed_package(installed):
    assert len(installed) > 50, sorted(installed)
    for name in ("accel", "accel.kernels", "accel.backends", "accel.cli", "accel.kernels.ops.rms_norm"):
        assert installed[name].endswith("__init__.py"), name
    assert all(m == "accel" or m.startswith("accel.") for m in installed)


def test_no_import_loops(installed):
    edges = graph(installed)
    loops = cycles(edges)
    if loops:
        body = "\n".join(describe_cycle(loop, edges, installed) for loop in loops)
        pytest.fail(f"{len(loops)} import loop(s) inside accel (function-level imports count; "
                    f"TYPE_CHECKING imports do not) -- {FIX_LOOP}:\n{body}", pytrace=False)


def test_only_entry_scripts_import_the_command_line(installed):
    """The CLI (``accel.cli``) is the top layer: it calls the library (``accel.kernels.bench`` among it), never the
    other way. Outside ``accel.cli`` only entry scripts (``__main__`` modules, imported by nothing) import it."""
    edges = graph(installed)
    bad = [f"{_shown(installed[a])}:{imp.lineno}: {a} -> {b} ({imp.scope})"
           for a, targets in sorted(edges.items()) if not (a == "accel.cli" or a.startswith("accel.cli."))
           and not a.endswith(".__main__") and a != "__main__"
           for b, imps in sorted(targets.items()) if b == "accel.cli" or b.startswith("accel.cli.")
           for imp in imps]
    assert not bad, "library modules import the command line (let the CLI call them instead):\n" + "\n".join(bad)


def test_no_private_name_imports(installed):
    bad_reasons = [k for k, reason in ALLOWED_PRIVATE.items() if not str(reason).strip()]
    assert not bad_reasons, f"ALLOWED_PRIVATE entries need a reason: {bad_reasons}"
    uses = private_uses(installed)
    seen = {(u.importer, u.module, u.name) for u in uses}
    stale = sorted(set(ALLOWED_PRIVATE) - seen)
    assert not stale, f"ALLOWED_PRIVATE entries no longer needed, remove them: {stale}"
    bad = [u for u in uses if (u.importer, u.module, u.name) not in ALLOWED_PRIVATE]
    if bad:
        pytest.fail(f"{len(bad)} use(s) of another module's private name inside accel:\n"
                    + "\n".join("  " + u.message() for u in bad), pytrace=False)


def _write(root, files: dict[str, str]) -> list[tuple[str, str]]:
    for rel, source in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
    return [("fake", str(root / "fake"))]


def test_checker_finds_planted_loop_and_private_use(tmp_path):
    roots = _write(tmp_path, {
        "fake/__init__.py": "from . import a\n",
        "fake/a.py": """
            from fake import b
            from .b import _SECRET
            _MINE = 1
            """,
        "fake/b.py": """
            import fake.sub.c as c
            _SECRET = 2
            def late():
                from .a import _MINE   # function-level import closes the loop a -> b -> a
                return c._TABLE
            """,
        "fake/sub/__init__.py": "",
        "fake/sub/c.py": """
            from typing import TYPE_CHECKING
            from .. import _private_mod   # a private MODULE: allowed
            if TYPE_CHECKING:
                from fake import a       # never runs: no edge
            _TABLE = {}
            """,
        "fake/_private_mod.py": "__all__ = []\n",
    })
    modules = walk(roots)
    assert set(modules) == {"fake", "fake.a", "fake.b", "fake.sub", "fake.sub.c", "fake._private_mod"}
    assert imports("fake.sub.c", modules["fake.sub.c"], modules) == [
        Import("fake._private_mod", "_private_mod", 3, False, "module level"),
        Import("fake.a", "a", 5, True, "module level")]
    assert [i[:3] for i in imports("fake.b", modules["fake.b"], modules)] == [
        ("fake.sub.c", None, 2), ("fake.a", "_MINE", 5)]
    edges = graph(modules)
    assert cycles(edges) == [["fake.a", "fake.b", "fake.a"]]
    assert "in late()" in describe_cycle(["fake.a", "fake.b", "fake.a"], edges, modules)
    assert [(u.importer, u.module, u.name, u.how) for u in private_uses(modules)] == [
        ("fake.a", "fake.b", "_SECRET", "from-import"),
        ("fake.b", "fake.a", "_MINE", "from-import"),
        ("fake.b", "fake.sub.c", "_TABLE", "attribute")]


def test_checker_finds_nothing_in_a_clean_tree(tmp_path):
    roots = _write(tmp_path, {
        "fake/__init__.py": "from .a import public\nfrom . import _impl\n__version__ = '1'\n",
        "fake/_impl.py": "from __future__ import annotations\nimport os\nVALUE = os.sep\n",
        "fake/a.py": """
            import fake._impl as impl
            def public():
                from fake import _impl as again   # private module, no loop: _impl imports nothing of fake
                return impl.VALUE, again.__name__, impl.__doc__
            """,
    })
    modules = walk(roots)
    assert len(modules) == 3
    edges = graph(modules)
    assert edges["fake"] == {"fake.a": [Import("fake.a", "public", 1, False, "module level")],
                             "fake._impl": [Import("fake._impl", "_impl", 2, False, "module level")]}
    assert cycles(edges) == []
    assert private_uses(modules) == []


def test_checker_sees_a_self_edge_and_relative_parents(tmp_path):
    roots = _write(tmp_path, {
        "fake/__init__.py": "",
        "fake/x/__init__.py": "",
        "fake/x/y.py": "def f():\n    from . import y\n    from .. import x\n    import fake.x.y\n",
    })
    modules = walk(roots)
    edges = graph(modules)
    assert sorted(edges["fake.x.y"]) == ["fake.x", "fake.x.y"]
    assert cycles(edges) == [["fake.x.y", "fake.x.y"]]
