"""The job read model: the ``jobs`` and ``job_items`` tables that screens and services
read instead of asking Temporal. Only this package writes them."""
