"""One declaration of a job's columns: ``JobView`` says what callers see, and every read
(the store's, the plain reads of the CLI and the API), the API's resource and the CLI's
keys are derived from it. Held here against the table, so that a field added to the
view without its column (or a column renamed) fails before any statement runs."""

from __future__ import annotations

from hubjobs.readmodel.reads import JOB_COLUMN_NAMES, JOB_COLUMNS
from hubjobs.readmodel.tables import Job
from hubjobs.readmodel.views import API_JOB_FIELDS, JobView
from starter.api.resources import JobResource


def test_every_field_of_the_view_is_a_column_of_the_table() -> None:
    columns = {column.name for column in Job.__table__.columns}
    assert set(JOB_COLUMN_NAMES) <= columns, set(JOB_COLUMN_NAMES) - columns
    assert JOB_COLUMN_NAMES == tuple(JobView.model_fields)
    assert JOB_COLUMNS.split(", ") == list(JOB_COLUMN_NAMES)


def test_what_the_table_keeps_to_itself_is_said() -> None:
    """Columns no caller sees: bookkeeping of the lifecycle."""
    hidden = {column.name for column in Job.__table__.columns} - set(JOB_COLUMN_NAMES)
    assert hidden == {"run_id", "updated_at"}


def test_the_api_shows_fields_of_the_view() -> None:
    assert set(API_JOB_FIELDS) <= set(JobView.model_fields)
    assert set(JobResource.model_fields) == {*API_JOB_FIELDS, "has_failed_items", "status_url"}
