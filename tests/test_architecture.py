"""The shape of the package, checked from its imports: no import circle between modules (not even
one through annotations), and no import from a lower layer to a higher one (docs/architecture.md
draws the same layers)."""

from __future__ import annotations

import ast
from pathlib import Path

import gatekeeper

PACKAGE = Path(gatekeeper.__file__).parent

# Lowest first. A module may import its own layer and the layers below, never one above.
LAYERS: list[set[str]] = [
    {"errors", "types", "rules.tiers", "observe", "peers"},  # contracts (the tier ladder), observability
    {"suite"},  # the DSL, pure
    {"store"},  # profiles and where they are kept
    {"rules"},  # which tool a tier (and a measurement) may see: protocol-free rules
    {"protocols"},  # one codec per client protocol
    {"drift"},  # live evidence
    {"config"},  # the YAML config -> typed settings
    {"measuring"},  # runner, confidence, backends, service, scheduler
    {"core"},  # the Gatekeeper facade, resolver, capability routing
    {"inprocess", "mcp"},  # in-process front ends; the MCP gateway
    {"server"},  # the proxy app, upstream, admin, console
    {"cli", "__init__", "__main__", "adapters"},  # the command and the public API
]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, module: str, is_package: bool, modules: set[str], annotations: bool) -> set[str]:
    """Every gatekeeper module `tree` imports, at any depth (lazy imports count); those under
    `if TYPE_CHECKING:` (annotations only: no import at run time) only with `annotations`.
    `from a import b` imports the module `a.b` when there is one, else a name of `a`."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking(node) and not annotations:
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("gatekeeper"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base if is_package else base[:-1]
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            if target.startswith("gatekeeper"):
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    found.add(sub if sub in modules else target)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _graph(annotations: bool = False) -> dict[str, set[str]]:
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    # gatekeeper/adapters is a symlink to the top-level adapters/, which rglob does not follow
    for path in (PACKAGE / "adapters").glob("*.py"):
        files["gatekeeper.adapters" + ("" if path.stem == "__init__" else f".{path.stem}")] = path
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        raw = _imports(ast.parse(path.read_text()), name, path.name == "__init__.py", set(files), annotations)
        graph[name] = {t for t in raw if t in files and t != name}
    return graph


def _layer(module: str) -> int:
    """The layer of a module: by its own name within its folder when a layer names it
    (`rules.tiers`), else by its folder."""
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else "__init__"
    for name in (".".join(parts[1:3]), top):
        for index, layer in enumerate(LAYERS):
            if name in layer:
                return index
    raise AssertionError(f"{module}: its folder {top!r} is in no layer of tests/test_architecture.py")


def test_no_module_imports_a_higher_layer() -> None:
    upward = [
        f"{src} -> {dst}"
        for src, targets in _graph().items()
        for dst in sorted(targets)
        if _layer(dst) > _layer(src) and src.split(".")[:2] != dst.split(".")[:2]
    ]
    assert upward == []


def test_the_import_graph_has_no_cycle() -> None:
    # Annotation-only imports count: a circle hidden under TYPE_CHECKING is still two modules
    # that cannot be understood (or moved) one without the other.
    graph = _graph(annotations=True)
    # A package's __init__ re-exporting its submodules is not a circle: the edge from a submodule
    # to its own package's __init__ is how Python loads it, not a dependency.
    edges = {src: {d for d in dsts if not src.startswith(d + ".")} for src, dsts in graph.items()}
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def walk(node: str, stack: list[str]) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                walk(nxt, stack)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            walk(node, [])
    assert cycles == []


def test_outside_protocols_a_protocol_is_reached_through_the_registry():
    # Protocol knowledge lives in the codecs and the registry (protocols/table.py): no module
    # outside gatekeeper/protocols/ imports one protocol's own package (chat/, responses/, ...);
    # it asks the registry for the entry, codec or translator instead.
    own = {p.name for p in (PACKAGE / "protocols").iterdir() if (p / "__init__.py").is_file()}
    reaching = [
        f"{src} -> {dst}"
        for src, targets in _graph(annotations=True).items()
        if not src.startswith("gatekeeper.protocols")
        for dst in sorted(targets)
        if dst.split(".")[:3][-1] in own and dst.startswith("gatekeeper.protocols.")
    ]
    assert reaching == []


# A translator's job is to read chat: it may import chat's answer reader.
_TRANSLATION = {"gatekeeper.protocols.chat.read"}


def test_a_protocol_package_imports_no_other_protocol() -> None:
    # One protocol's folder is its own: what it needs of another protocol comes through the
    # registry or a shared table under protocols/, never by importing that protocol's modules
    # (a translator reading chat's answers is the one purpose that crosses).
    own = {p.name for p in (PACKAGE / "protocols").iterdir() if (p / "__init__.py").is_file()}

    def protocol_of(module: str) -> str | None:
        parts = module.split(".")
        return parts[2] if len(parts) > 2 and parts[1] == "protocols" and parts[2] in own else None

    crossing = {
        f"{src} -> {dst}"
        for src, targets in _graph(annotations=True).items()
        for dst in targets
        if protocol_of(src) is not None
        and protocol_of(dst) not in (None, protocol_of(src))
        and not (src.endswith(".translate") and dst in _TRANSLATION)
    }
    assert crossing == set()
