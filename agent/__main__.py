"""Entry point for ``python -m agent``."""

from agent.cli import entry

raise SystemExit(entry())
