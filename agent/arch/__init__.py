"""Per-architecture facts: register numbering and names."""
