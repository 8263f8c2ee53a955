"""The hub's own domain, as hubjobs needs it: who may act in a workspace, and pages
(tags, ETags, the ETag-guarded update). Owned by the hub; shipped here."""
