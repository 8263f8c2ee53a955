import time
from sqlalchemy import text
from starter.client import HubJobsClient
from hubjobs.readmodel import store
from hubjobs.readmodel.status import ItemState
from tests.conftest import seed

async def test_measure(engine, temporal, settings):
    course = await seed(engine, 100_000)
    hub = HubJobsClient(temporal, engine, settings)
    jobs = hub.scope(course.workspace_id, course.actor_id)
    job = await jobs.start_course_tagging(root_page_id=course.root_page_id, tag="m")
    async with engine.begin() as conn:
        await conn.execute(text("UPDATE job_items SET state = CASE WHEN ordinal % 8000 = 0 THEN 'failed' ELSE 'succeeded' END WHERE job_id = :j"), {"j": job.id})
        await conn.execute(text("ANALYZE job_items"))
    async with engine.connect() as conn:
        times = []
        for i in range(40):
            t = time.perf_counter()
            rows = await store.list_items(conn, job.id, state=ItemState.failed, after=0, limit=101)
            times.append((time.perf_counter() - t) * 1000)
        print("\nfailed (12 of 100k), same connection, ms per call:", " ".join(f"{x:.1f}" for x in times), len(rows))
