"""The security section of `Settings` (acn/common/settings.py composes the sections)."""

from __future__ import annotations

from pydantic import Field

from acn.common.models import StrictModel


class SecuritySettings(StrictModel):
    """Who may call: API keys, the inspector's sign-in, hosts, origins and proxies; what is kept secret at rest."""

    api_keys: str = Field(
        default="",
        description=(
            "Comma-separated `key:tenant` pairs, or a path to a file with one pair per line. When set, every request "
            "needs `Authorization: Bearer <key>` (the `/ui` inspector also takes the cookie its sign-in page hands "
            "out) and each tenant sees only its own rows. Keys shorter than 16 characters stop the start; "
            "`acn keygen` prints a good one."
        ),
    )
    metrics_token: str = Field(
        default="",
        description=(
            "Bearer token for `/metrics`, so a scraper need not hold a tenant's key. When it or `ACN_API_KEYS` is set, "
            "`/metrics` needs it or an API key (401 otherwise); with neither it is open."
        ),
    )
    ui_secret: str = Field(
        default="",
        description=(
            "Secret that signs the inspector's sign-in cookies and CSRF tokens (HMAC-SHA256). Give every replica the "
            "same value. Empty: derived from `ACN_API_KEYS` (replicas with the same keys agree; changing the keys "
            "signs everyone out); with no keys, random per process."
        ),
    )
    ui_session_minutes: int = Field(
        default=240, ge=1, le=10_080,
        description="How long a `/ui` sign-in lasts (1 to 10,080) before the inspector asks for a key again.",
    )
    allowed_hosts: str = Field(
        default="",
        description=(
            "Comma-separated host names the server answers for (`name`, `name:port`, `.example.com` for a domain and "
            "its subdomains, `*` for any); any other `Host` header is 421 `host_not_allowed` — the guard against DNS "
            "rebinding. Empty: `localhost`, `127.0.0.1`, `[::1]` (any port) when bound to loopback; when bound "
            "elsewhere (`ACN_HOST`, or `ACN_BIND` under gunicorn), any host if `ACN_API_KEYS` is set (a rebinding page "
            "holds no key), otherwise the loopback names and IP addresses only (rebinding needs a DNS name) — list "
            "container or proxy names then."
        ),
    )
    cors_origins: str = Field(
        default="",
        description=(
            "Comma-separated browser origins (`https://app.example.com`) allowed to call the API from their pages: "
            "they get `Access-Control-Allow-Origin` and answered preflights (`OPTIONS`). A request whose `Origin` is "
            "neither listed nor this server's own is 403 `origin_not_allowed`, as is a write marked `Sec-Fetch-Site: "
            "cross-site` without an `Origin`. `*` is refused."
        ),
    )
    trusted_proxies: str = Field(
        default="",
        description=(
            "Comma-separated IP addresses or networks (`10.0.0.5`, `172.16.0.0/12`) of reverse proxies whose "
            "`X-Forwarded-For/-Proto/-Host/-Port/-Prefix` are believed (one hop, werkzeug's ProxyFix). Anyone else's "
            "`X-Forwarded-*` headers are ignored."
        ),
    )
    llm_allowed_urls: str = Field(
        default="",
        description=(
            "Comma-separated base URLs a request's `llm.base_url` may name (scheme, host, port and path prefix must "
            "match, as parsed). Empty (the default): request-chosen LLM URLs are refused (403 `llm_url_not_allowed`). "
            "Such a URL never gets `ACN_LLM_API_KEY`, only a key the request carries; its host must resolve to public "
            "addresses only, unless the entry names an IP address itself (consent to that private address). See "
            "[providers.md](providers.md#llm-endpoints)."
        ),
    )
    encryption_key: str = Field(
        default="",
        description=(
            "Fernet key (urlsafe base64, 32 bytes), or a path to a file holding one: session snapshots and memory rows "
            "(archived turns, memories: content, key and meta) are encrypted at rest, and memories stay searchable by "
            "BM25 over keyed hashes of their tokens (see [storage.md](storage.md#encryption-at-rest)). Keep it apart "
            "from the store; `python -m acn.storage.database.crypto` prints a new key. A wrong or missing key for "
            "encrypted data is a clear `encryption_key_error`, never plaintext guessed."
        ),
    )
    redact_snapshots: bool = Field(
        default=False,
        description=(
            "Mask phone, ID-card, bank-card numbers and e-mails in stored session snapshots (content, names, meta and "
            "tool-call arguments; full-width, dotted, spaced and escaped forms too)."
        ),
    )
