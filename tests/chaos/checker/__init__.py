"""The campaign's checker: the invariants, read from PostgreSQL (its own SQL, psycopg)
and Temporal (the temporalio client), and the campaign's ledger. It imports nothing of
the product (hubjobs, starter, activities, workflows, worker, tests.support), so that a
bug there cannot hide itself here (tests/unit/test_chaos_plan.py holds the rule), and
runs in a process of its own: ``python -m tests.chaos.checker``."""
