"""DWARF: types and layouts, functions, parameter locations, conventions.

Part of target: imports target and the shared modules only.
"""
