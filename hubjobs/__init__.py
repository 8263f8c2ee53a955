"""What the worker and the starter share: settings, the schema, the read model."""
