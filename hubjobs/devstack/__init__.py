"""The embedded development stack (`hubjobs up`): a real PostgreSQL and a real Temporal
dev server from wheels, and demo data. Not used in production."""
