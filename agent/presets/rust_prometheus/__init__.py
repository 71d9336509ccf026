"""The prometheus crate's preset: ``facts`` (its names, columns and site tags, no
binary read) and ``rules`` (finding its updates in a binary)."""
