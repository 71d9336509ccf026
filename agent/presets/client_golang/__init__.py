"""The client_golang preset: ``facts`` (its rules and names, no binary read) and
``rules`` (finding its updates in a binary)."""
