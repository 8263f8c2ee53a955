"""The deployment's webhook policy: whether a start may carry a ``notify_url`` (a signing
secret is set, the destination allowed) and the secret deliveries are signed with.
Checked where a job's row is created (a direct start gets a failed row with the code)."""

from __future__ import annotations

import asyncio

from hubjobs.errors import InvalidInput
from hubjobs.settings import Settings
from hubjobs.webhooks.destinations import check_notify_url


class WebhooksNotConfigured(InvalidInput):
    """No signing secret: a delivery could not be verified by its receiver."""

    code = "webhooks_not_configured"

    def __init__(self) -> None:
        super().__init__(
            "this deployment sends no completion webhooks (HUBJOBS_WEBHOOK_SECRET is not set)"
        )


def signing_secret(settings: Settings) -> bytes | None:
    secret = settings.webhook_secret
    return None if secret is None else secret.get_secret_value().encode()


def check_start(settings: Settings, notify_url: str) -> str:
    """``notify_url`` if a start may carry it; else ``webhooks_not_configured`` or
    ``invalid_notify_url``. Resolves the host name (blocking: see ``checked``)."""
    if signing_secret(settings) is None:
        raise WebhooksNotConfigured()
    return check_notify_url(notify_url, settings.webhook_allowed_hosts)


async def checked(settings: Settings, notify_url: str | None) -> str | None:
    """``check_start`` off the event loop (a name's resolution may take a while)."""
    if notify_url is None:
        return None
    return await asyncio.to_thread(check_start, settings, notify_url)
