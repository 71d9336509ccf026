"""Go runtime metadata: what a Go binary keeps without DWARF or a symbol table
(pclntab, module data, build info, type descriptors), and DWARF made from it.

Part of target: imports target and the shared modules only.
"""
