"""Temporal plumbing shared by the starter and the worker: connecting, the messages
that cross Temporal, starting a job's workflow, search attributes, Schedules."""
