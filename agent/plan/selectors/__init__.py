"""Selectors: turn ``c.desc.fqName`` into a fetch program, walking the types in DWARF.

A value starts where the parameter lives at the probed instruction (registers or a
stack slot), follows pointers (Go's ``p.f`` through a pointer, as in Go), struct
fields, array and slice indexes, and ends in a decoding chosen from the final type.

Rust's standard types read as a Rust programmer writes them: ``String`` and ``&str``
are strings, ``Vec<T>`` and slices are indexed, ``len(x)`` is a length; ``Box``,
``Arc``, ``Rc`` and references are followed, and single-field wrappers (atomics,
``Cell``, ``NonNull``, newtypes), ``Mutex`` and ``RefCell`` read as what they wrap, the
way Rust's auto-deref finds a field. An enum reads as the name of its active variant;
``.Variant`` enters one (the value is absent while another is active), and an
``Option`` reads as its ``Some`` value.

``walker`` walks the steps every language shares, ``go`` and ``rust`` add their own,
``kinds`` says what a type is, and ``places`` where a value is on the way.
"""
