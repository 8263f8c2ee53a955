"""Operator tools that work on a database directly, outside the job system: restore."""
