"""The package layout is the pipeline: imports run one way, and none runs in a circle.

Every import in agent/ (at the top of a module, inside a function, or for type
checking only) is read with ``ast``. Each module belongs to a stage by its package;
a module may import its own stage and the stages below it, never one above.
"""

from __future__ import annotations

import ast
from pathlib import Path

AGENT = Path(__file__).resolve().parent.parent / "agent"

# Lowest first. The shared modules at the top of agent/ are below every stage; the
# command line is above them all.
SHARED = ("agent", "agent.errors", "agent.files", "agent.logs", "agent.cache", "agent.cpus",
          "agent.numbers",
          "agent.heap")
STAGES = ("config", "binary", "plan", "live", "kernel", "output", "presets", "service",
          "top", "tools")
TOP = ("agent.cli", "agent.commands", "agent.__main__")


def _module(path: Path) -> str:
    parts = path.relative_to(AGENT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _rank(module: str) -> int:
    if module in SHARED:
        return 0
    if module in TOP:
        return len(STAGES) + 1
    stage = module.split(".")[1]
    assert stage in STAGES, f"{module}: agent/{stage} is not one of the stages {STAGES}"
    return STAGES.index(stage) + 1


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The agent modules ``path`` imports (a name imported from a package counts as the
    module of that name when there is one)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("agent")}
        elif isinstance(node, ast.ImportFrom) and node.module and \
                node.module.startswith("agent") and node.level == 0:
            for a in node.names:
                full = f"{node.module}.{a.name}"
                out.add(full if full in modules else node.module)
    return out


def _graph() -> dict[str, set[str]]:
    files = {_module(p): p for p in AGENT.rglob("*.py")}
    built = {_module(p) for p in AGENT.rglob("*.c")}  # extensions in C: they import none
    modules = set(files) | built
    graph = {m: _imports(p, modules) - {m} for m, p in files.items()} | {m: set() for m in built}
    for m, deps in graph.items():
        unknown = deps - modules
        assert not unknown, f"{m} imports {unknown}, which are not modules of agent/"
    return graph


def test_imports_run_down_the_stages() -> None:
    wrong = sorted(f"{m} imports {d}" for m, deps in _graph().items() for d in deps
                   if _rank(d) > _rank(m))
    assert not wrong, "imports against the order " + " < ".join(STAGES) + ":\n" + \
        "\n".join(wrong)


def cycles(graph: dict[str, set[str]]) -> list[str]:
    """Every circle of imports a depth-first walk of ``graph`` meets, as "a -> b -> a"."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    found = []

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for d in sorted(graph.get(m, ())):
            if d == "agent":
                continue
            if state.get(d) == 1:
                found.append(" -> ".join([*path[path.index(d):], d]))
            elif d not in state:
                visit(d, [*path, d])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    return found


def test_no_import_cycles() -> None:
    found = cycles(_graph())
    assert not found, "import cycles:\n" + "\n".join(found)


def test_only_the_compiler_child_imports_bcc() -> None:
    importers = sorted(_module(p) for p in AGENT.rglob("*.py")
                       if any(isinstance(n, (ast.Import, ast.ImportFrom)) and (
                           any(a.name.split(".")[0] == "bcc" for a in n.names)
                           if isinstance(n, ast.Import) else
                           (n.module or "").split(".")[0] == "bcc")
                              for n in ast.walk(ast.parse(p.read_text()))))
    assert importers == ["agent.kernel.compile"]


def test_the_checker_sees_a_wrong_import(tmp_path: Path) -> None:
    """The walk itself: an upward import and a circle in a scratch tree are found."""
    lower = tmp_path / "lower.py"
    lower.write_text("from agent.tools import bench\n")
    assert _imports(lower, {"agent.tools.bench"}) == {"agent.tools.bench"}
    assert _rank("agent.tools.bench") > _rank("agent.plan.model")
    ring = {"agent.plan.a": {"agent.plan.b"}, "agent.plan.b": {"agent.plan.c"},
            "agent.plan.c": {"agent.plan.a", "agent"}, "agent.plan.d": {"agent.plan.a"}}
    assert cycles(ring) == ["agent.plan.a -> agent.plan.b -> agent.plan.c -> agent.plan.a"]
    assert cycles({**ring, "agent.plan.c": {"agent"}}) == []


def test_every_package_is_packaged() -> None:
    """pyproject.toml lists every package of agent/, so an installed noop has them all."""
    import tomllib

    listed = set(tomllib.loads((AGENT.parent / "pyproject.toml").read_text())
                 ["tool"]["setuptools"]["packages"])
    found = {_module(p) for p in AGENT.rglob("__init__.py")}
    assert found <= listed, f"not in pyproject.toml's packages: {sorted(found - listed)}"


def test_no_message_says_noop_twice() -> None:
    """logs.say puts ``noop: `` before every line: a message that starts with it again
    would read ``noop: noop: ...``."""
    said = []
    for path in AGENT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Call) and node.args and (
                    (isinstance(node.func, ast.Attribute) and node.func.attr == "say") or
                    (isinstance(node.func, ast.Name) and node.func.id == "say"))):
                continue
            first = node.args[0]
            head = first.values[0] if isinstance(first, ast.JoinedStr) and first.values \
                else first
            if isinstance(head, ast.Constant) and str(head.value).startswith("noop: "):
                said.append(f"{path.relative_to(AGENT.parent)}:{node.lineno}")
    assert not said, "messages that start with 'noop: ': " + ", ".join(said)


def test_a_start_from_a_cached_plan_imports_no_binary_reader() -> None:
    """What a start from a cached plan runs (the command line, the presets' plans,
    decoders, meta-metrics and printer, loading, the terminal and the daemon, its
    server) imports no DWARF reader, no preset's rules, no pyelftools and no capstone:
    those are imported when a plan is made; nor a YAML reader, which a spec or a web
    config needs and ``--binary`` does not. A fresh interpreter, so that nothing this
    test run imported before counts."""
    import subprocess
    import sys

    warm = ("agent.cli", "agent.presets.plans", "agent.presets.updates", "agent.presets.meta",
            "agent.presets.printer", "agent.output.trace", "agent.output.exporter",
            "agent.service.daemon", "agent.kernel.load", "agent.kernel.codegen",
            "agent.binary.debuginfo", "agent.output.serve", "agent.commands")
    code = (f"import sys\nfor m in {warm!r}: __import__(m)\n"
            "print('\\n'.join(m for m in sys.modules if '.dwarf' in m or m.endswith('.rules')"
            " or m.split('.')[0] in ('elftools', 'capstone', 'yaml')))")
    heavy = subprocess.run([sys.executable, "-c", code], cwd=AGENT.parent, check=True,
                           capture_output=True, text=True).stdout.split()
    assert not heavy, f"imported by a warm start: {heavy}"
