"""Independent tools (gdb, llvm-dwarfdump) run and parsed as test oracles.

Nothing here imports noop: the oracles must stay independent of the code
they check.
"""
