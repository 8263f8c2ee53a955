"""Each kind's payload and result in the OpenAPI document: the models the kinds declare
(hubjobs/kinds/), as components, named by the start route's body and the status route's
200 answer. The kind is the path's, so they are ``anyOf`` (a backup's payload, ``{}``,
would match any), and ``x-kind-payloads`` / ``x-kind-results`` map each kind to its
schema for a generated client."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from hubjobs.kinds import REGISTRY

START = ("/workspaces/{workspace_id}/jobs/{kind}", "post")
STATUS = ("/workspaces/{workspace_id}/jobs/{job_id}", "get")
REF = "#/components/schemas/{model}"


def _kind_components() -> tuple[dict[str, Any], dict[str, str], dict[str, str]]:
    """The components, and each kind's payload and result references."""
    models: list[tuple[type[BaseModel], JsonSchemaMode]] = []
    for kind in REGISTRY:
        models += [(kind.payload, "validation"), (kind.result, "serialization")]
    refs, top = models_json_schema(models, ref_template=REF)
    payloads = {k.name: refs[(k.payload, "validation")]["$ref"] for k in REGISTRY}
    results = {k.name: refs[(k.result, "serialization")]["$ref"] for k in REGISTRY}
    return top.get("$defs", {}), payloads, results


def with_kind_schemas(schema: dict[str, Any]) -> dict[str, Any]:
    components, payloads, results = _kind_components()
    schema.setdefault("components", {}).setdefault("schemas", {}).update(components)
    start = schema["paths"][START[0]][START[1]]
    start["requestBody"]["content"]["application/json"]["schema"] = {
        "anyOf": [{"$ref": ref} for ref in payloads.values()],
        "description": "The kind's payload (x-kind-payloads: the schema of each kind)",
        "x-kind-payloads": {kind: {"$ref": ref} for kind, ref in payloads.items()},
    }
    done = schema["paths"][STATUS[0]][STATUS[1]]["responses"]["200"]
    done["content"]["application/json"]["schema"] = {
        "anyOf": [{"$ref": ref} for ref in results.values()],
        "x-kind-results": {kind: {"$ref": ref} for kind, ref in results.items()},
    }
    return schema


def install_kind_schemas(app: FastAPI) -> None:
    """Makes the app's OpenAPI document (built once, on first request) carry them."""
    build: Callable[[], dict[str, Any]] = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = with_kind_schemas(build())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
