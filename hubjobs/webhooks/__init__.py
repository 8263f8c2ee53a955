"""Completion webhooks: signing a delivery and the destinations one may go to."""
