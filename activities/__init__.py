"""All side effects: database work of the lifecycle and of each kind."""
