"""The baseline HTTP API: FastAPI under uvicorn doing one query per GET (the job's row,
scoped to the workspace in the path), no authentication, no hubjobs.

    python bench/bare_api.py --port 8081 --database-url postgresql://…
"""

from __future__ import annotations

import argparse
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

QUERY = (
    "SELECT id, kind, status, workspace_id, total, processed, succeeded, skipped, failed, "
    "progress_message, result, error_code, error_message, created_at, started_at, "
    "finished_at FROM jobs WHERE id = %s AND workspace_id = %s"
)


def create_app(database_url: str) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncConnectionPool(database_url, min_size=1, max_size=5) as pool:
            app.state.pool = pool
            yield

    app = FastAPI(lifespan=lifespan)

    @app.get("/workspaces/{workspace_id}/jobs/{job_id}")
    async def job(workspace_id: uuid.UUID, job_id: uuid.UUID, request: Request) -> JSONResponse:
        pool: AsyncConnectionPool[Any] = request.app.state.pool
        async with pool.connection() as conn:
            cursor = conn.cursor(row_factory=dict_row)
            row = await (await cursor.execute(QUERY, (job_id, workspace_id))).fetchone()
        if row is None:
            return JSONResponse({"error": "not found"}, status_code=404)
        plain = (int, dict, type(None))
        return JSONResponse({k: v if isinstance(v, plain) else str(v) for k, v in row.items()})

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    return app


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--database-url", required=True)
    args = parser.parse_args()
    uvicorn.run(
        create_app(args.database_url),
        host="127.0.0.1",
        port=args.port,
        log_config=None,
        access_log=False,
    )
