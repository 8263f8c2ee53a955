"""The database: the tables (``schema``), their Alembic migrations, and engines."""
