"""What a binary and a process are: ELF, DWARF, ABIs, amd64, sites, discovery.

Imports only the shared modules: no spec, plan, kernel, output or service.
"""
