"""Metrics, traces and structured logs."""
