"""DWARF reading: types and their layouts, functions, parameter locations."""
