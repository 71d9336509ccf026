"""Plan -> C -> loaded programs: codegen, layouts, loading, ring buffer, features.

Imports plan and below only: no output, service or tools. Only compile, in a child
process, imports bcc.
"""
