"""The import structure of tracelab (issue 26), read from the source with `ast` (nothing is imported):

- the command line (`tracelab.cli`) and the dashboard (`app`) reach the library only through its facade:
  they import `tracelab.api` (and `tracelab.api.types`), `tracelab.render`, `tracelab.errors` and the one
  formatter `tracelab.text_format`;
- code flows one way, in the layer order of docs/DESIGN.md ("Data flows one way"), with the facade
  between render and the user interfaces: no module imports a layer above its own;
- no import circle among tracelab's modules;
- module and function sizes (a separate test: the known offenders are listed, and the list may only shrink).

Imports inside functions count (a lazy import is still a dependency); those under `if TYPE_CHECKING:` do
not (annotations only). Each known exception names who removes it."""

from __future__ import annotations

import ast
import sys
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# docs/DESIGN.md, "Data flows one way", bottom to top: a module may import its own layer and those below.
# `model` (with errors, settings, the workloads' parameters) is what every layer shares; the readers (`io`) and the
# store sit side by side on it; the facade (`api`) and the services it offers (rank sets on Dask, the upload
# sandbox, recording, the MCP server, the demo runs, the workloads) sit between render and cli/app.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base", ("tracelab", "tracelab.errors", "tracelab.settings", "tracelab.text_format", "tracelab.hot_journal",
              "tracelab.workload_params", "tracelab.model", "tracelab._native")),
    ("io", ("tracelab.io", "tracelab.store")),
    ("analyses", ("tracelab.analyses",)),
    ("render", ("tracelab.render",)),
    ("api", ("tracelab.api", "tracelab.distributed", "tracelab.sandbox", "tracelab.record", "tracelab.mcp_server",
             "tracelab.demo", "tracelab.workloads")),
    ("ui", ("tracelab.cli", "tracelab.__main__", "app")),
)

# what cli and app may import of tracelab (beyond their own package, and cli -> app: `serve` starts it)
FACADE = ("tracelab.api", "tracelab.render", "tracelab.errors", "tracelab.text_format")  # the one formatter: a leaf

# (importer, imported) pairs known to break a rule today, and who removes them
KNOWN_FACADE: set[tuple[str, str]] = set()
KNOWN_UPWARD: set[tuple[str, str]] = set()
# strongly connected groups of modules known today (each a circle); a new circle, or a known one that grows,
# fails. Lead: results <-> setup and the steps family; 26a: the parsers (its __init__ and its modules).
KNOWN_CYCLES: tuple[frozenset[str], ...] = ()


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def modules() -> dict[str, Path]:
    files = [*(ROOT / "tracelab").rglob("*.py"), *(ROOT / "app").rglob("*.py")]
    return {_module_name(p): p for p in files if "__pycache__" not in p.parts}


def _known_module(name: str) -> str | None:
    """The module `name` names, or the nearest package that holds it (`tracelab.api.analyze` -> `tracelab.api`)."""
    mods = modules()
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if node.level:
        base = module.split(".")
        if modules()[module].name != "__init__.py":
            base = base[:-1]
        base = base[: len(base) - (node.level - 1)]
        prefix = ".".join([*base, node.module] if node.module else base)
    else:
        prefix = node.module or ""
    return [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in modules() else prefix for a in node.names]


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test):
            for body in n.body:
                skip.update(id(c) for c in ast.walk(body))
    return skip


@cache
def imports() -> dict[str, frozenset[str]]:
    """Every first-party module (tracelab.*, app.*) -> the first-party modules it imports."""
    out = {}
    for name, path in modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        skip = _type_checking_nodes(tree)
        found = set()
        for n in ast.walk(tree):
            if isinstance(n, (ast.Import, ast.ImportFrom)) and id(n) not in skip:
                for t in _targets(name, n):
                    m = _known_module(t)
                    if m is not None and m != name:
                        found.add(m)
        out[name] = frozenset(found)
    return out


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def layer_of(name: str) -> int:
    best = (-1, -1)
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if _under(name, p) and len(p) > best[1]:
                best = (i, len(p))
    assert best[0] >= 0, f"{name} is in no layer: add it to LAYERS (and to docs/DESIGN.md)"
    return best[0]


def _facade_breaks() -> set[tuple[str, str]]:
    out = set()
    for m, targets in imports().items():
        own = "app" if _under(m, "app") else "tracelab.cli" if _under(m, "tracelab.cli") else None
        if own is None:
            continue
        for t in targets:
            if _under(t, own) or t == "tracelab" or (own == "tracelab.cli" and _under(t, "app")):
                continue
            if not any(_under(t, f) for f in FACADE):
                out.add((m, t))
    return out


def test_cli_and_app_use_only_the_facade():
    breaks = _facade_breaks()
    known = KNOWN_FACADE
    for m, t in sorted(breaks & known):
        print(f"known: {m} imports {t}")
    assert not breaks - known, f"cli/app import past the facade (use tracelab.api): {sorted(breaks - known)}"


def test_the_facade_offers_what_cli_and_app_need():
    """Sanity of the reading: cli and app do import the facade, and nothing in render or below imports it."""
    users = {m for m, ts in imports().items() if any(_under(t, "tracelab.api") for t in ts)}
    assert "tracelab.cli.common" in users and "app.state" in users
    below = sorted(m for m in users if layer_of(m) < layer_of("tracelab.api"))
    assert not below, f"modules below the facade import it: {below}"


def test_no_upward_import():
    up = {
        (m, t)
        for m, targets in imports().items()
        for t in targets
        if layer_of(t) > layer_of(m)
    }
    for m, t in sorted(up & KNOWN_UPWARD):
        print(f"known: {m} ({LAYERS[layer_of(m)][0]}) imports {t} ({LAYERS[layer_of(t)][0]})")
    assert not up - KNOWN_UPWARD, f"imports against the flow of docs/DESIGN.md: {sorted(up - KNOWN_UPWARD)}"


def strongly_connected(graph: dict[str, frozenset[str]]) -> list[frozenset[str]]:
    """Tarjan's algorithm: the groups of more than one module that import each other (through others)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[frozenset[str]] = []
    counter = [0]
    limit = sys.getrecursionlimit()  # restored after: other tests rely on the default (hostile JSON depth)

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(frozenset(group))

    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for v in sorted(graph):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return out


def test_strongly_connected_finds_a_circle():
    g = {"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset({"a"}), "d": frozenset({"a"})}
    assert strongly_connected(g) == [frozenset({"a", "b", "c"})]


def test_no_import_circle():
    groups = strongly_connected(dict(imports()))
    new = [sorted(g) for g in groups if not any(g <= k for k in KNOWN_CYCLES)]
    for g in groups:
        if any(g <= k for k in KNOWN_CYCLES):
            print(f"known circle: {sorted(g)}")
    assert not new, f"import circles: {new}"


# ---- sizes ------------------------------------------------------------------------------------------

MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80
# known today; the lead shrinks these lists (a module or function that grows past the limit, or a new one,
# fails; one listed here that is now within the limit fails too, so the list stays true)
KNOWN_BIG_MODULES: set[str] = set()
KNOWN_LONG_FUNCTIONS: set[str] = set()


def _sizes() -> tuple[dict[str, int], dict[str, int]]:
    module_lines, function_lines = {}, {}
    for name, path in modules().items():
        text = path.read_text(encoding="utf-8")
        module_lines[name] = len(text.splitlines())
        for n in ast.walk(ast.parse(text)):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                function_lines[f"{name}:{n.name}:{n.lineno}"] = n.end_lineno - n.lineno + 1
    return module_lines, function_lines


def test_module_and_function_sizes():
    module_lines, function_lines = _sizes()
    big = {m for m, n in module_lines.items() if n > MAX_MODULE_LINES}
    long = {f.rsplit(":", 1)[0] for f, n in function_lines.items() if n > MAX_FUNCTION_LINES}
    for m in sorted(big):
        print(f"module over {MAX_MODULE_LINES} lines: {m} ({module_lines[m]})")
    for f in sorted(long):
        n = max(v for k, v in function_lines.items() if k.rsplit(":", 1)[0] == f)
        print(f"function over {MAX_FUNCTION_LINES} lines: {f} ({n})")
    assert not big - KNOWN_BIG_MODULES, f"modules over {MAX_MODULE_LINES} lines: {sorted(big - KNOWN_BIG_MODULES)}"
    assert not long - KNOWN_LONG_FUNCTIONS, f"functions over {MAX_FUNCTION_LINES} lines: {sorted(long - KNOWN_LONG_FUNCTIONS)}"
    assert not KNOWN_BIG_MODULES - big, f"now within the limit, take off the list: {sorted(KNOWN_BIG_MODULES - big)}"
    assert not KNOWN_LONG_FUNCTIONS - long, f"now within the limit, take off the list: {sorted(KNOWN_LONG_FUNCTIONS - long)}"


def test_cli_and_app_are_small():
    """The user interfaces are thin: no cli or app module over the size limit, no cli function over the
    length limit (the app's long layout functions are in KNOWN_LONG_FUNCTIONS, to be split)."""
    module_lines, function_lines = _sizes()
    ui = ("tracelab.cli", "app")
    assert not [m for m, n in module_lines.items() if any(_under(m, u) for u in ui) and n > MAX_MODULE_LINES]
    assert not [f for f, n in function_lines.items() if _under(f.split(":")[0], "tracelab.cli") and n > MAX_FUNCTION_LINES]
