"""``noop install-service``: put the systemd unit in place, naming this noop, with a
starting config at /etc/noop/probes.yaml when there is none.

``--root DIR`` writes under DIR instead of / (to stage a package, or to look first);
then systemctl is not asked to reload.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

from agent.errors import NoopError

UNIT_PATH = Path("etc/systemd/system/noop.service")
CONFIG_PATH = Path("etc/noop/probes.yaml")
TEMPLATE_EXEC = "/usr/local/bin/noop"  # what deploy/systemd/noop.service names

CONFIG = """\
# noop's spec (see `noop check --schema`, and probes.yaml in noop's source).
# Name each target by the path of its binary; then `systemctl reload noop`.
version: 1
targets:
  service:
    binary: /usr/local/bin/your-service
probes: []
"""


def _deploy_file(*parts: str) -> str:
    """A file of deploy/, from the installed package or the source tree."""
    try:
        return resources.files("agent.deploy").joinpath(*parts).read_text()
    except (ModuleNotFoundError, FileNotFoundError):
        return Path(__file__).resolve().parents[2].joinpath("deploy", *parts).read_text()


def this_noop() -> Path:
    """The noop command of this installation (the script next to the interpreter)."""
    found = Path(sys.executable).parent / "noop"
    if found.is_file():
        return found.absolute()
    which = shutil.which("noop")
    if which is None:
        raise NoopError("cannot find the noop command of this installation",
                        "install noop (pip install .) into a venv and run its noop")
    return Path(which).absolute()


def unit_text(noop: Path) -> str:
    template = _deploy_file("systemd", "noop.service")
    if f"ExecStart={TEMPLATE_EXEC} " not in template:
        raise NoopError("the unit template does not start " + TEMPLATE_EXEC,
                        "reinstall noop")
    return template.replace(TEMPLATE_EXEC, str(noop))


def install(root: Path = Path("/")) -> list[str]:
    """Write the unit (always) and the config (only when missing); what was done, one
    line each."""
    noop = this_noop()
    said = []
    unit = root / UNIT_PATH
    config = root / CONFIG_PATH
    try:
        unit.parent.mkdir(parents=True, exist_ok=True)
        unit.write_text(unit_text(noop))
        said.append(f"wrote {unit} (ExecStart={noop} run ...)")
        if config.exists():
            said.append(f"kept {config}")
        else:
            config.parent.mkdir(parents=True, exist_ok=True)
            config.write_text(CONFIG)
            config.chmod(0o644)
            said.append(f"wrote {config}: name your targets and probes there")
    except OSError as exc:
        raise NoopError(f"cannot install under {root}: {exc.strerror or exc}",
                        "run as root, or stage it elsewhere with --root DIR") from None
    if root == Path("/") and Path("/run/systemd/system").is_dir():
        done = subprocess.run(["systemctl", "daemon-reload"], capture_output=True,
                              text=True, check=False)
        said.append("systemctl daemon-reload" + ("" if done.returncode == 0
                                                 else f" failed: {done.stderr.strip()}"))
        said.append("start it: systemctl enable --now noop")
    return said
