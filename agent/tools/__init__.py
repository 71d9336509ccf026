"""Inspection (funcs, struct, vars) and its rendering, doctor, bench.

Imports service and below: never the command line.
"""
