"""The chaos campaign (`make chaos SEED=… MINUTES=…`): random, overlapping faults thrown
at a stack of its own under a mixed load, then every invariant checked by a checker that
reads PostgreSQL and Temporal and imports nothing of the product (docs/operations/
failures.md, "The chaos campaign").

Nothing is imported here: the checker runs in a process of its own and must load none
of the product's modules."""
