"""probes.yaml (``--config``) -> a frozen Spec: reading with positions, validation,
metrics, labels, and how a target names its program.

Imports only the shared modules (errors): no binary, plan or anything above.
"""
