"""What a binary is: ELF, DWARF, Go's runtime metadata, ABIs, amd64, sites, proofs.

Imports only the shared modules: no spec, plan, live processes, kernel, output or
service.
"""
