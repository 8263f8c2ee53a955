"""``GET /contract`` and ``GET /contract/{name}``: the Temporal contract as
hubjobs.temporal.contract builds it, the same bytes as docs/contract/. Public, like the
OpenAPI document: it says how to call, nothing about any job."""

from __future__ import annotations

import functools

from fastapi import APIRouter
from fastapi.responses import Response

from hubjobs.errors import NotFound
from hubjobs.temporal.contract import INDEX, documents, render

router = APIRouter(prefix="/contract", tags=["contract"])


@functools.cache
def _rendered() -> dict[str, str]:
    return {name: render(document) for name, document in documents().items()}


class ContractFileNotFound(NotFound):
    code = "contract_file_not_found"


@router.get(
    "",
    operation_id="get_contract_index",
    summary="How to start, follow and cancel a job straight through Temporal",
)
async def contract_index() -> Response:
    return Response(_rendered()[INDEX], media_type="application/json")


@router.get(
    "/{name}",
    operation_id="get_contract_file",
    summary="One file of the Temporal contract (a JSON Schema)",
    responses={404: {"description": "No such file (contract_file_not_found)"}},
)
async def contract_file(name: str) -> Response:
    body = _rendered().get(name)
    if body is None:
        raise ContractFileNotFound("the contract has no such file")
    return Response(body, media_type="application/schema+json")
