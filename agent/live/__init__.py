"""The running processes: which run what a target names, their containers and pods.

Imports spec and binary: a plan never looks at a process; the commands hand it the
files this package finds.
"""
