"""Calling conventions: where arguments and results live when DWARF is silent.

Part of target: imports target and the shared modules only.
"""
