"""The serving section of `Settings` (acn/common/settings.py composes the sections)."""

from __future__ import annotations

from pydantic import Field

from acn.common.models import StrictModel


class ServingSettings(StrictModel):
    """How `python server.py` (and gunicorn) listen, take connections and log."""

    host: str = Field(
        default="127.0.0.1",
        description=(
            "Address `python server.py` binds to (gunicorn sets it from `ACN_BIND`); it decides the default of "
            "`ACN_ALLOWED_HOSTS`."
        ),
    )
    port: int = Field(
        default=8000, ge=0, le=65535,
        description="Port `python server.py` listens on (`python server.py --host H --port P` overrides both).",
    )
    threads: int = Field(
        default=8, ge=1, le=256,
        description=(
            "Request threads of `python server.py` (waitress, keep-alive connections) and of gunicorn "
            "(`deploy/gunicorn.conf.py`)."
        ),
    )
    tenant_threads: int = Field(
        default=0, ge=0, le=256,
        description=(
            "Request threads one tenant (one API key's tenant) may hold at once, from the start of its request until "
            "its answer is handed to the server; past it that tenant's next request is answered at once with 429 "
            "`tenant_busy` and `Retry-After: 1`, so other tenants and `/healthz` keep the rest. `0`: half of "
            "`ACN_THREADS` (at least 1). Counted only where `ACN_API_KEYS` names two tenants or more (a lone tenant "
            "may use every thread); requests without a key (`/healthz`, the open documents) are not counted."
        ),
    )
    connection_limit: int = Field(
        default=4000, ge=10, le=100_000,
        description=(
            "Connections `python server.py` (waitress) keeps open at once; past it new ones wait in the kernel's "
            "listen queue. A connection that sends its request slowly, or never reads its answer, costs a socket "
            "and a buffer, not a request thread (a request reaches a thread only once it is wholly received). The "
            "server raises its open-files limit towards this at start."
        ),
    )
    connections_per_address: int = Field(
        default=256, ge=0, le=100_000,
        description=(
            "Connections `python server.py` keeps open at once from one client address; one more is answered 429 "
            "and closed. Addresses in `ACN_TRUSTED_PROXIES` are exempt (every client behind a proxy shares its "
            "address; nginx caps per client itself). `0`: no cap."
        ),
    )
    channel_timeout_seconds: int = Field(
        default=60, ge=1, le=3600,
        description=(
            "`python server.py` closes a connection on which nothing was sent or received for this long: an idle "
            "keep-alive connection, or a client that does not read its answer (the buffered answer is dropped)."
        ),
    )
    max_body_bytes: int = Field(
        default=2_000_000, gt=0,
        description=(
            "Largest accepted request body, in bytes (413 `payload_too_large` above; `python server.py` does not even "
            "buffer a body over 8× this)."
        ),
    )
    public_url: str = Field(
        default="",
        description=(
            "The URL clients reach the server at (`https://acn.example.com` behind a TLS proxy): `servers[0].url` of "
            "`/openapi.json` and `/openapi-admin.json`, so an imported Dify/Coze tool calls it. Empty: the request's "
            "own URL."
        ),
    )
    log_level: str = Field(
        default="INFO",
        description=(
            "Level of the server's structured JSON logs (personal data is masked in them, tracebacks included; "
            "pydantic's echo of the input is dropped)."
        ),
    )
