"""A program's own metrics mirrored from its memory, whatever library keeps them:
``model`` (what a walk finds and a scrape reads), ``core`` (the mirror: walks, members,
values, the page). Each library's side is in its preset's package (``mirror`` there)."""

# For noop run's mirror: the probe where the program gathers a registry (client_golang's
# ``(*Registry).Gather``, the crate's ``RegistryCore::gather``), which tells which
# registries the program serves, the ones its globals do not hold too. Its events go to
# the mirror (``Session.taps``), not to the updates' decoder.
GATHERED = "registry_gathered"
