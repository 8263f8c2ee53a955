"""What a generated client reads from the OpenAPI document: a bearer security scheme on
every workspace route (not a header parameter), each kind's payload and result as
schemas, the error codes as an enum (tests/unit/test_error_codes.py), named
operations."""

from __future__ import annotations

from typing import Any

from hubjobs.kinds import REGISTRY
from hubjobs.settings import Settings
from starter.api.app import create_app


def document() -> dict[str, Any]:
    schema: dict[str, Any] = create_app(Settings()).openapi()
    return schema


def test_workspace_routes_use_the_bearer_scheme() -> None:
    schema = document()
    assert schema["components"]["securitySchemes"]["HTTPBearer"] == {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "JWT",
        "description": "A JWT whose `sub` is the actor's id",
    }
    for path, operations in schema["paths"].items():
        for operation in operations.values():
            names = [p["name"].lower() for p in operation.get("parameters", [])]
            assert "authorization" not in names, path
            if path.startswith("/workspaces/"):
                assert operation["security"] == [{"HTTPBearer": []}], path


def test_each_kind_has_its_payload_and_result() -> None:
    schema = document()
    components = schema["components"]["schemas"]
    start = schema["paths"]["/workspaces/{workspace_id}/jobs/{kind}"]["post"]
    body = start["requestBody"]["content"]["application/json"]["schema"]
    done = schema["paths"]["/workspaces/{workspace_id}/jobs/{job_id}"]["get"]["responses"]["200"]
    result = done["content"]["application/json"]["schema"]
    for kind in REGISTRY:
        payload_ref = f"#/components/schemas/{kind.payload.__name__}"
        result_ref = f"#/components/schemas/{kind.result.__name__}"
        assert body["x-kind-payloads"][kind.name] == {"$ref": payload_ref}
        assert result["x-kind-results"][kind.name] == {"$ref": result_ref}
        assert {"$ref": payload_ref} in body["anyOf"] and {"$ref": result_ref} in result["anyOf"]
        assert components[kind.payload.__name__]["type"] == "object"
        published = kind.result.model_json_schema(mode="serialization")["properties"]
        assert components[kind.result.__name__]["properties"].keys() == published.keys()
    assert components["CourseTaggingPayload"]["required"] == ["root_page_id", "tag"]


def test_the_lists_stream_and_the_bulk_cancel_are_operations() -> None:
    """GET …/jobs/events and POST …/jobs/cancel: named, documented, and routed before
    the job's and the kind's paths they would otherwise match."""
    paths = document()["paths"]
    stream = paths["/workspaces/{workspace_id}/jobs/events"]["get"]
    assert stream["operationId"] == "job_list_events"
    assert "text/event-stream" in stream["responses"]["200"]["content"]
    bulk = paths["/workspaces/{workspace_id}/jobs/cancel"]["post"]
    assert bulk["operationId"] == "cancel_jobs"
    body = bulk["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/BulkCancel"}
    answer = bulk["responses"]["202"]["content"]["application/json"]["schema"]
    assert answer == {"$ref": "#/components/schemas/BulkCancelAnswer"}
    order = list(paths)
    assert order.index("/workspaces/{workspace_id}/jobs/events") < order.index(
        "/workspaces/{workspace_id}/jobs/{job_id}"
    )


def test_the_bulk_retry_is_an_operation_with_the_lists_filter() -> None:
    """POST …/jobs/retry: named, routed before a kind's start (``retry`` is no kind), its
    filter the bulk cancel's, which names the list's query parameters."""
    schema = document()
    paths = schema["paths"]
    bulk = paths["/workspaces/{workspace_id}/jobs/retry"]["post"]
    assert bulk["operationId"] == "retry_jobs"
    body = bulk["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/BulkRetry"}
    answer = bulk["responses"]["202"]["content"]["application/json"]["schema"]
    assert answer == {"$ref": "#/components/schemas/BulkRetryAnswer"}
    order = list(paths)
    assert order.index("/workspaces/{workspace_id}/jobs/retry") < order.index(
        "/workspaces/{workspace_id}/jobs/{kind}"
    )
    components = schema["components"]["schemas"]
    filters = set(components["JobFilter"]["properties"])
    listed = {
        p["name"]
        for p in paths["/workspaces/{workspace_id}/jobs"]["get"]["parameters"]
        if p["in"] == "query"
    }
    assert filters == listed - {"sort", "limit", "before", "to_retry"}
