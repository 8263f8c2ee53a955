"""Deterministic workflow code: the shared job lifecycle, one module per kind, and
maintenance."""
