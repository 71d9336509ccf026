"""Spec + target -> Plan: resolution, selectors, placement, the preset's plan.

Imports spec and target only: no kernel, output, service or tools (no bcc).
"""
