# The hubjobs image: workers (`worker`, the default) and the HTTP API (`api`).
# Everything is configured from the environment (HUBJOBS_*); nothing secret is baked in.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN useradd --create-home --uid 10001 hubjobs
WORKDIR /app
COPY pyproject.toml README.md worker.py ./
COPY hubjobs ./hubjobs
COPY workflows ./workflows
COPY activities ./activities
COPY starter ./starter
# The one image runs every service: the API's packages and tracing's (the extras) too.
# An image of workers alone: --build-arg EXTRAS=otel.
ARG EXTRAS=api,otel
RUN pip install ".[$EXTRAS]"

USER hubjobs
# The build id names this image's code for Worker Deployment versioning: a job workflow
# stays on the build that started it. One per image (`docker compose build` passes
# HUBJOBS_BUILD_ID from .env); never reused for different code.
ARG BUILD_ID=dev
LABEL org.opencontainers.image.version=$BUILD_ID
ENV HUBJOBS_BUILD_ID=$BUILD_ID \
    HUBJOBS_HOME=/home/hubjobs/.hubjobs \
    HUBJOBS_METRICS_HOST=0.0.0.0 \
    HUBJOBS_API_HOST=0.0.0.0 \
    HUBJOBS_LOG_JSON=true
EXPOSE 8080 9464
# Workers drain on SIGTERM (in-flight activities get 10 s, the rest retry elsewhere).
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=30s --timeout=10s --start-period=20s CMD ["hubjobs", "health"]
ENTRYPOINT ["hubjobs"]
CMD ["worker"]
