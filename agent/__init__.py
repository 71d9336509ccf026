"""noop: a uprobe metrics agent for compiled services (Go, Rust, C)."""

__version__ = "0.1.0"
