"""probes.yaml -> a frozen Spec: reading with positions, validation, metrics, labels.

Imports only the shared modules (errors): no target, plan or anything above.
"""
