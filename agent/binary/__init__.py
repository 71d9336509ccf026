"""Reading target binaries: ELF facts (build-id, Go version, symbols) and their DWARF."""
