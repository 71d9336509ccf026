"""Built-in plans that need no spec."""
