"""Go runtime metadata: what a Go binary keeps without DWARF or a symbol table
(pclntab, module data, build info, type descriptors), and DWARF made from it.

Part of target: imports target and the shared modules only.
"""

# The DWARF made from the metadata (``synth``): bump when what is written changes, and
# cached copies are made anew. Here, so that naming a cached copy imports no writer.
FORMAT = 5  # 5: arm64's frames (the link register)
