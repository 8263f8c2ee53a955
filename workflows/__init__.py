"""Deterministic workflow code: the shared job lifecycle (``lifecycle``), one module
per job kind (``<kind>.py``, found through the kind registry), and the scheduled
maintenance workflows."""
