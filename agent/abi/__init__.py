"""Calling conventions: where arguments and results live when DWARF does not say."""
