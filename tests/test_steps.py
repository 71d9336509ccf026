"""Each build step's environment has what the step imports: every step that runs
noop's Python, run here under the environment that step runs in, so that an import
pulling a dependency the step lacks fails a test, not a user's build (the image's base
once failed on a fresh machine because a module its headers step reads had started to
import orjson, which only noop's venv has)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())

# Run with -I: imports every module named, with every top-level import outside the
# standard library and ALLOWED refused as the step's environment would refuse it.
BLOCKER = r"""
import importlib, importlib.abc, runpy, sys
allowed = set(sys.argv[1].split()) | set(sys.stdlib_module_names)
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] not in allowed:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Absent())
sys.path.insert(0, sys.argv[2])
what, names = sys.argv[3], sys.argv[4:]
if what == "modules":
    for name in names:
        importlib.import_module(name)
else:
    sys.argv = names
    runpy.run_path(names[0], run_name="__main__")
"""


def _requirement_name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[(]", requirement, maxsplit=1)[0]


def _imports_of(distributions: list[str]) -> set[str]:
    """The top-level import names of ``distributions`` and of all they require."""
    provides: dict[str, set[str]] = {}
    for top, dists in metadata.packages_distributions().items():
        for d in dists:
            provides.setdefault(d.lower().replace("_", "-"), set()).add(top)
    names: set[str] = set()
    todo, seen = list(distributions), set()
    while todo:
        dist = todo.pop().lower().replace("_", "-")
        if dist in seen:
            continue
        seen.add(dist)
        names |= provides.get(dist, set())
        try:
            required = metadata.requires(dist) or []
        except metadata.PackageNotFoundError:
            continue
        todo += [_requirement_name(r) for r in required if "extra ==" not in r]
    return names


def _agent_modules() -> list[str]:
    found = []
    for path in sorted((REPO / "agent").rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        if parts[-1] == "__main__":
            continue  # runs noop when imported
        found.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


def _install_sh_modules() -> list[str]:
    """The modules of noop's that deploy/image/install.sh's python3 lines import."""
    text = (REPO / "deploy" / "image" / "install.sh").read_text()
    return sorted(set(re.findall(r"\b(?:from|import)\s+(agent(?:\.\w+)*)", text)))


@dataclass(frozen=True)
class Step:
    name: str
    allowed: frozenset[str]  # top-level imports its environment has, beside the stdlib
    what: str  # "modules": import them; "run": run the file with the arguments
    names: tuple[str, ...]


def _steps() -> list[Step]:
    runtime = [_requirement_name(r) for r in PYPROJECT["project"]["dependencies"]]
    return [
        # deploy/image/install.sh headers, in the base with nothing but Debian's python3
        Step("the image's base: install.sh headers, bare python3", frozenset({"agent"}),
             "modules", tuple(_install_sh_modules())),
        # deploy/image/install.sh noop: the venv /opt/noop, with the wheels of noop's
        # runtime dependencies and Debian's python3-bpfcc: any module may run there
        Step("the image: noop, with its runtime dependencies and BCC",
             frozenset({"agent", "bcc", *_imports_of(runtime)}), "modules",
             tuple(_agent_modules())),
        # setup.sh's last word on the suite, whatever else is broken: the stdlib alone
        Step("tests/harness/results.py, the summary", frozenset(), "run",
             (str(REPO / "tests" / "harness" / "results.py"),)),
    ]


@pytest.mark.parametrize("step", _steps(), ids=lambda s: s.name)
def test_each_step_imports_only_what_its_environment_has(step: Step) -> None:
    assert step.names, f"{step.name}: nothing to import: the step's lookup went stale"
    done = subprocess.run([sys.executable, "-I", "-c", BLOCKER, " ".join(sorted(step.allowed)),
                           str(REPO), step.what, *step.names],
                          capture_output=True, text=True, timeout=300, check=False)
    lines = done.stderr.strip().splitlines()
    assert "ModuleNotFoundError" not in done.stderr, f"{step.name}: {lines[-1]}"
    expected = {"results.py": 2}.get(Path(step.names[0]).name, 0)
    assert done.returncode == expected, f"{step.name}: {done.stderr}"


def test_the_base_s_step_runs_under_debian_s_own_python3() -> None:
    """The headers step's files, as deploy/build-image lists them: found by importing
    them with /usr/bin/python3 -I -S (the standard library alone), before any download."""
    done = subprocess.run([str(REPO / "deploy" / "image" / "step-files"), str(REPO)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "agent/kernel/kheaders.py" in done.stdout.split()


def test_a_step_that_imports_what_the_base_lacks_stops_the_build_in_one_line(
        tmp_path: Path) -> None:
    """A module the headers step reads importing a package the base's python3 lacks:
    deploy/build-image stops at once, before it downloads anything, naming the step,
    the module and the package."""
    copy = tmp_path / "tree"
    for part in ("deploy", "agent"):
        shutil.copytree(REPO / part, copy / part,
                        ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    shutil.copy2(REPO / "pyproject.toml", copy / "pyproject.toml")
    files = copy / "agent" / "files.py"
    files.write_text(files.read_text().replace("\nimport errno\n", "\nimport errno\n"
                                               "import orjson  # noqa\n", 1))
    sources = tmp_path / "debian.sources"
    sources.write_text("Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm\n")
    done = subprocess.run([str(copy / "deploy" / "build-image")], capture_output=True,
                          text=True, timeout=60, check=False,
                          env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
                               "PYTHON": sys.executable, "NOOP_PRINT_BASE_KEY": "1",
                               "NOOP_APT_SOURCES": str(sources)})
    assert done.returncode == 1
    (line,) = done.stderr.strip().splitlines()
    assert "install.sh imports agent.kernel.kheaders, which needs orjson" in line, line
    assert "not in the image base's python3" in line
