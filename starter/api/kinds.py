"""``GET /kinds``: the job kinds this deployment serves, each with its CLI command, help
and payload's JSON Schema, read from the kinds' declarations. Public, like the OpenAPI
document: the CLI builds its start commands from it, so a kind declared anywhere (even
outside hubjobs, HUBJOBS_KIND_MODULES) gets one."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from hubjobs.kinds import REGISTRY

router = APIRouter(tags=["kinds"])


@router.get(
    "/kinds",
    summary="The job kinds served: name, title, CLI command, help, payload schema",
)
async def list_kinds() -> dict[str, list[dict[str, Any]]]:
    return {"kinds": [kind.described() for kind in REGISTRY]}
