"""What pyproject.toml cannot say without an experimental table: noop's walk of DWARF
units in C, an optional extension (where no C compiler builds it, the same walk runs in
Python, slower on a large binary). Everything else is in pyproject.toml."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("agent.binary.dwarf._walk", ["agent/binary/dwarf/_walk.c"],
                             optional=True, extra_compile_args=["-O2", "-Wall", "-Wextra"])])
