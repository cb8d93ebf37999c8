"""The plugin server: create_app(settings) builds a Flask app over the node registry.

Run `python server.py [--host H] [--port P]`; nothing happens at import time (run as a script, the cyclic
garbage collector waits for the imports below: see main).
"""

# ruff: noqa: E402  (run as a script, the collector is switched off before the imports, so gc comes first)
from __future__ import annotations

import gc

if __name__ == "__main__":
    gc.disable()

import argparse
import hmac
import json
import logging
import re
import signal
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

from flask import Flask, Response, current_app, g, request
from prometheus_client import CONTENT_TYPE_LATEST
from waitress.server import create_server
from werkzeug.exceptions import HTTPException

# First of ours, before anything imports pymilvus (and with it pyarrow): it picks Arrow's memory pool.
import acn.app.process
from acn.app.http_guard import GuardPolicy, add_cors_headers, build_policy, guard_request
from acn.app.json_body import read_json_body
from acn.app.key_guard import KeyGuard, open_key_guard
from acn.app.mcp_route import register_mcp
from acn.app.openapi import build_admin_openapi, build_manifest, build_openapi
from acn.app.proxies import TrustedProxyFix, is_trusted, parse_trusted_proxies
from acn.app.responses import error_response, ok_response, validate
from acn.app.runtime import Runtime
from acn.app.serving import AddressCap, install_channel_class, raise_open_files, waitress_options
from acn.app.statuses import http_status, retry_after
from acn.app.tenant_share import TenantShare, share_of
from acn.common.auth import parse_api_keys
from acn.common.errors import PackError, SignInThrottledError, UnauthorizedError, UnknownNodeError
from acn.common.logs import configure_logging
from acn.common.metrics import Metrics
from acn.common.pack import VERSION
from acn.common.settings import Settings
from acn.inspector import create_blueprint
from acn.inspector.signin import UiAuth
from acn.inspector.signin import covers as covers_ui
from acn.integrations.dify_extension import register_dify_extension
from acn.nodes import all_nodes
from acn.nodes.memory_admin import (
    MemoryImportRequest,
    MemoryListRequest,
    NamespaceDeleteRequest,
    delete_memory,
    delete_namespace,
    get_memory,
    import_memories,
    list_memories,
)
from acn.nodes.spec import NodeSpec

log = logging.getLogger("acn.server")
REQUEST_ID = re.compile(r"[A-Za-z0-9_.:-]{1,64}")  # fullmatch: "$" would let a trailing newline through
# Pages whose forms may post x-www-form-urlencoded / multipart (the inspector); see acn/app/http_guard.py.
FORM_PREFIXES = ("/ui/login", "/ui/logout")
# waitress reads a whole request body before the app sees it; it refuses (plain-text 413) bodies above this many
# times ACN_MAX_BODY_BYTES, so an oversized upload cannot fill the disk. Below that the app answers the JSON 413.
BODY_BUFFER_FACTOR = 8
# Container objects made (net of those freed) between collections of the youngest generation: see freeze_imports.
YOUNG_OBJECTS = 2000


def create_app(settings: Settings | None = None) -> Flask:
    """Build the app: read settings, open the store, register routes and error handlers."""
    settings = settings or Settings.from_env()
    configure_logging(settings.log_level)
    acn.app.process.prepare_process(settings)  # before Runtime.open starts threads (see there)
    keys = parse_api_keys(settings.api_keys)
    proxies = parse_trusted_proxies(settings.trusted_proxies)  # a malformed entry stops start-up, before the store
    runtime = Runtime.open(settings)
    app = Flask(__name__)
    app.wsgi_app = acn.app.process.requests_first(TrustedProxyFix(app.wsgi_app, proxies))  # type: ignore[method-assign]
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes
    app.json.ensure_ascii = False  # type: ignore[attr-defined]
    app.extensions["acn"] = runtime
    app.extensions["acn_metrics"] = Metrics()
    if runtime.backlog is not None:
        backlog = runtime.backlog
        app.extensions["acn_metrics"].watch_backlog(backlog.queued, lambda: backlog.filled)
    lock_stats = getattr(runtime.store, "lock_stats", None)
    if callable(lock_stats):
        app.extensions["acn_metrics"].watch_store(lock_stats)
    nodes = all_nodes()
    app.extensions["acn_nodes"] = nodes
    metrics: Metrics = app.extensions["acn_metrics"]
    guard = open_key_guard(settings.redis_url, prefix=settings.collection_prefix, observe=metrics.observe_auth)
    app.extensions["acn_key_guard"] = guard
    runtime.closers.append(guard.close)
    app.extensions["acn_ui_auth"] = UiAuth.from_settings(settings, keys, guard)
    policy = build_policy(settings.allowed_hosts, settings.cors_origins, settings.host, bool(keys), FORM_PREFIXES)
    app.extensions["acn_guard"] = policy
    # Where keys name two tenants or more, one holds at most its share of the request threads (a lone tenant has
    # nobody to share them with: it may use them all).
    share = TenantShare(share_of(settings.threads, settings.tenant_threads)) if len(set(keys.values())) > 1 else None
    app.extensions["acn_tenant_share"] = share
    _register_hooks(app, keys, policy, guard, share)
    _register_errors(app)
    _register_node_routes(app, runtime, nodes)
    _register_admin_routes(app, runtime)
    _register_meta_routes(app, runtime, nodes, keys, guard)
    register_dify_extension(app, runtime)
    register_mcp(app, runtime, nodes)  # the nodes as MCP tools at /mcp (acn/app/mcp_route.py)
    # The inspector's /ui pages take the API key header or their own sign-in cookie (acn/inspector/signin.py).
    app.register_blueprint(create_blueprint())
    return app


# -- request lifecycle ---------------------------------------------------------------------


def _register_hooks(app: Flask, keys: dict[str, str], policy: GuardPolicy, guard: KeyGuard,
                    share: TenantShare | None) -> None:
    ui_auth: UiAuth = app.extensions["acn_ui_auth"]
    # /healthz and /metrics check keys themselves (a bare health answer, a metrics token).
    open_paths = {"/healthz", "/readyz", "/openapi.json", "/openapi-admin.json", "/v1/manifest", "/metrics"}

    @app.before_request
    def _start() -> Response | None:
        incoming = request.headers.get("X-Request-Id", "")
        g.request_id = incoming if REQUEST_ID.fullmatch(incoming) else uuid.uuid4().hex
        g.started = time.perf_counter()
        g.tenant = ""
        # Host, Origin and content type before the key: a refused browser request learns nothing about keys.
        preflight = guard_request(request, policy)
        if preflight is not None:
            return preflight
        if request.path in open_paths:
            g.tenant = ""
        elif covers_ui(request.path):  # the key header, or the /ui sign-in cookie (which nothing outside /ui takes)
            g.tenant = ui_auth.tenant(request)
        else:
            g.tenant = guard.authenticate(request.headers.get("Authorization"), keys, client_address(), "api_key")
        if share is not None and g.tenant:
            g.release_share = share.acquire(g.tenant)
        return None

    @app.after_request
    def _finish(response: Response) -> Response:
        elapsed = time.perf_counter() - g.get("started", time.perf_counter())
        response.headers["X-Request-Id"] = g.get("request_id", "")
        add_cors_headers(response, request, policy)
        # W3C Server-Timing: a caller (or a browser's devtools) tells the server's time from the network's.
        response.headers["Server-Timing"] = f"app;dur={elapsed * 1000:.2f}"
        metrics: Metrics = current_app.extensions["acn_metrics"]
        metrics.observe_request(route_label(), response.status_code, elapsed)
        log.info("request", extra={"method": request.method, "path": request.path,
                                   "status": response.status_code, "request_id": g.get("request_id", "")})
        return response

    @app.teardown_request
    def _release(_error: BaseException | None) -> None:
        # The tenant's slot covers the app's work; sending the answer never holds a thread for long, since every
        # answer fits the server's buffer (pages are bounded in bytes: acn/nodes/memory_admin.py) or the proxy's.
        release = g.pop("release_share", None)
        if release is not None:
            release()


def _register_errors(app: Flask) -> None:
    @app.errorhandler(PackError)
    def _pack_error(error: PackError) -> Response:
        response = error_response(http_status(error), error.code, error.message, error.errors)
        if (seconds := retry_after(error)) is not None:
            response.headers["Retry-After"] = str(seconds)
        return response

    @app.errorhandler(HTTPException)
    def _http_error(error: HTTPException) -> Response:
        status = error.code or 500
        codes = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large", 400: "bad_request"}
        message = {413: f"request body is larger than {app.config['MAX_CONTENT_LENGTH']} bytes"}.get(
            status, error.description or error.name)
        return error_response(status, codes.get(status, "http_error"), message)

    @app.errorhandler(Exception)
    def _unexpected(error: Exception) -> Response:
        log.error("unexpected error", exc_info=error, extra={"request_id": g.get("request_id", "")})
        return error_response(500, "internal_error", "unexpected server error; see the logs for this request_id")


def client_address() -> str:
    """Return the client's address the throttle counts by (the proxy's client with ACN_TRUSTED_PROXIES)."""
    return request.remote_addr or "unknown"


def route_label() -> str:
    """Return a bounded metrics label: the route rule, with the node name for known nodes."""
    rule = request.url_rule.rule if request.url_rule else "unmatched"
    name = (request.view_args or {}).get("name")
    known = current_app.extensions.get("acn_nodes", {})
    return rule.replace("<name>", name) if isinstance(name, str) and name in known else rule


# -- routes --------------------------------------------------------------------------------


def _register_node_routes(app: Flask, runtime: Runtime, nodes: dict[str, NodeSpec]) -> None:
    @app.post("/v1/nodes/<name>")
    def _run_node(name: str) -> Response:
        spec = nodes.get(name)
        if spec is None:
            raise UnknownNodeError(f"unknown node {name!r}; nodes: {', '.join(nodes)}")
        node_request = validate(spec.request_model, read_json_body())
        result = spec.run(node_request, runtime.deps(g.tenant))
        current_app.extensions["acn_metrics"].observe_result(name, result)
        return ok_response(result)


def _register_admin_routes(app: Flask, runtime: Runtime) -> None:
    def deps() -> Any:
        return runtime.deps(g.tenant)

    @app.get("/v1/memories")
    def _list() -> Response:
        return ok_response(list_memories(validate(MemoryListRequest, request.args.to_dict()), deps()))

    @app.delete("/v1/memories")
    def _delete_namespace() -> Response:
        return ok_response(delete_namespace(validate(NamespaceDeleteRequest, request.args.to_dict()), deps()))

    @app.post("/v1/memories/import")
    def _import() -> Response:
        return ok_response(import_memories(validate(MemoryImportRequest, read_json_body()), deps()))

    @app.get("/v1/memories/<memory_id>")
    def _get(memory_id: str) -> Response:
        return ok_response(get_memory(memory_id, deps()))

    @app.delete("/v1/memories/<memory_id>")
    def _delete(memory_id: str) -> Response:
        return ok_response(delete_memory(memory_id, deps()))


def _register_meta_routes(app: Flask, runtime: Runtime, nodes: dict[str, NodeSpec], keys: dict[str, str],
                          guard: KeyGuard) -> None:
    def as_json(data: Any) -> Response:
        return Response(json.dumps(data, ensure_ascii=False), mimetype="application/json")

    def has_valid_key() -> bool:
        # The keyed answers below tell a right key from a wrong one: the same throttle as every other route.
        try:
            guard.authenticate(request.headers.get("Authorization"), keys, client_address(), "api_key")
        except (UnauthorizedError, SignInThrottledError):
            return False
        return True

    @app.get("/healthz")
    def _health() -> Response:
        # A load balancer's probe holds no key: it gets liveness only, not the store path or whether auth is on.
        if keys and not has_valid_key():
            return as_json({"ok": True, "status": "ok", "request_id": g.get("request_id", "")})
        return as_json({"ok": True, "status": "ok", "version": VERSION, "store": runtime.store.info(),
                        "tokenizer": runtime.tokenizer.name, "embedder": runtime.settings.embedder,
                        "nodes": list(nodes), "auth": bool(keys), "request_id": g.get("request_id", "")})

    @app.get("/readyz")
    def _ready() -> Response:
        # Readiness, not liveness: 503 while start-up work that touches a whole store still runs in the background
        # (memory heads of rows written before they existed: acn/storage/repositories/memory_heads.py). Requests are
        # answered meanwhile, by the slower path; a load balancer may hold traffic back until this answers 200.
        # Then the start-up warmer (acn/app/warmer.py): recently active sessions' indexes, built before their
        # first call asks for them; its progress is reported as it goes.
        # First of all the store's first search (memories.py _warm_store), which start-up no longer waits for.
        warmer = runtime.warmer
        searching = runtime.memories.warming
        pending = (["store_search"] if searching is not None and searching.is_alive() else []) \
            + runtime.memories.heads.pending() + runtime.sessions.pending() \
            + (warmer.pending() if warmer is not None else []) \
            + (app.extensions["acn_mcp"].pending() if "acn_mcp" in app.extensions else [])
        response = as_json({"ok": not pending, "ready": not pending, "pending": pending,
                            "warming": warmer.progress() if warmer is not None else {},
                            "request_id": g.get("request_id", "")})
        response.status_code = 503 if pending else 200
        return response

    @app.get("/metrics")
    def _metrics() -> Response:
        token = runtime.settings.metrics_token
        if (keys or token) and not (metrics_token_presented(token) or (keys and has_valid_key())):
            raise UnauthorizedError("/metrics needs 'Authorization: Bearer <ACN_METRICS_TOKEN or an API key>'")
        return Response(current_app.extensions["acn_metrics"].render(), mimetype=CONTENT_TYPE_LATEST)

    @app.get("/v1/manifest")
    def _manifest() -> Response:
        return as_json(build_manifest(nodes))

    def public_url() -> str:
        # ACN_PUBLIC_URL when set: behind a TLS proxy the request's own URL is the proxy's inner http:// one.
        return runtime.settings.public_url.rstrip("/") or request.host_url.rstrip("/")

    @app.get("/openapi.json")
    def _openapi() -> Response:
        # The node operations only: what a Dify custom tool or Coze plugin imports as an agent's tools.
        return as_json(build_openapi(nodes, server_url=public_url()))

    @app.get("/openapi-admin.json")
    def _openapi_admin() -> Response:
        return as_json(build_admin_openapi(nodes, server_url=public_url()))


def metrics_token_presented(token: str) -> bool:
    """True when the request's Bearer credential is the metrics token (compared in constant time)."""
    scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
    return bool(token) and scheme.lower() == "bearer" and hmac.compare_digest(presented.strip().encode(),
                                                                              token.encode())


# -- command line --------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    """Serve the app with waitress; SIGTERM/SIGINT flush and close the store.

    waitress, not Flask's development server: it keeps connections alive (Werkzeug closes every one) and runs a
    fixed pool of request threads, so a workflow engine calling node after node pays for one connection. Its
    event loop reads whole requests and buffers answers, so slow clients cost sockets, not threads
    (acn/app/serving.py).
    """
    freeze_imports()
    try:
        settings = Settings.from_env()
        parser = argparse.ArgumentParser(description="Agent Context Nodes plugin server")
        parser.add_argument("--host", default=settings.host)
        parser.add_argument("--port", type=int, default=settings.port)
        args = parser.parse_args(argv)
        # The address actually bound decides which Host names are answered by default (ACN_ALLOWED_HOSTS).
        settings = settings.model_copy(update={"host": args.host})
        app = create_app(settings)
    except PackError as error:
        # A start-up failure is the operator's to fix: say what and why, without a traceback.
        print(f"agent-context-nodes: cannot start: {error.message}", file=sys.stderr)
        raise SystemExit(2) from None
    runtime: Runtime = app.extensions["acn"]
    app.extensions["acn_mcp"].prepare_in_background(
        after=runtime.warmer.first_loaded if runtime.warmer is not None else None)
    connections = raise_open_files(settings.connection_limit)
    try:
        server_map: dict[int, Any] = {}
        server = create_server(app, map=server_map, host=args.host, port=args.port,
                               **waitress_options(settings, settings.max_body_bytes * BODY_BUFFER_FACTOR, connections))
        proxies = parse_trusted_proxies(settings.trusted_proxies)
        cap = AddressCap(settings.connections_per_address, lambda address: is_trusted(address, proxies)) \
            if settings.connections_per_address else None
        install_channel_class(server_map, cap)
    except OSError as error:  # the port is taken or the address is not this machine's
        runtime.close()
        print(f"agent-context-nodes: cannot start: cannot listen on {args.host}:{args.port}: "
              f"{error.strerror or error}", file=sys.stderr)
        raise SystemExit(2) from None
    _install_signal_handlers(runtime.close)
    if not settings.api_keys:
        log.warning("no API keys configured (ACN_API_KEYS): anyone who can reach %s:%s can read and write",
                    args.host, args.port)
    log.info("listening", extra={"host": args.host, "port": args.port, "store": runtime.store.info()})
    try:
        server.run()
    finally:
        runtime.close()


def freeze_imports() -> None:
    """Keep what has been imported out of the cyclic collector's scans from now on, and switch the collector on.

    Importing the server makes ~210k objects that live as long as the process (modules, classes, functions:
    pymilvus, pandas, pyarrow, flask, pydantic models). Collected as they were made, the collector went over them
    again and again: ~0.2 s of CPU, about a sixth of launch → first answer (measured: 1.35–1.45 s of CPU with the
    collector on during the imports, 1.17–1.23 s with it off). `python server.py` switches it off before its
    imports (above); gc.freeze moves everything made so far out of its sight, so later collections (full ones
    included) do not scan the imports either. What freezing keeps that a collection would have freed: ~1,300
    objects of import-time cycles, once.

    The youngest generation is then collected every YOUNG_OBJECTS container objects made (net of those freed)
    instead of CPython's 700: an assemble or a record_turn holds a few hundred to ~2,000 objects at once (candidates,
    lines, rows), which at 700 lived through one or two young collections each call and were moved to the oldest
    generation. They piled up there until a full collection was due, and a full collection visits every long-lived
    object the process holds: at turn 3,000 of bench.long_session's chat 270 ms each, ~1.6 ms of CPU a turn
    (issue 47; gc.callbacks in the production server). At 2,000 the same calls free their objects by reference
    counting before a collection looks at them: young collections ~15 times fewer, no full one in 320 turns at turn
    3,000 (two in the 3,000 before), and what cycles a call leaves are still collected young.
    """
    gc.freeze()
    gc.set_threshold(YOUNG_OBJECTS, *gc.get_threshold()[1:])
    gc.enable()


def _install_signal_handlers(close: Callable[[], None]) -> None:
    def _stop(signum: int, _frame: Any) -> None:
        log.info("stopping", extra={"signal": signal.Signals(signum).name})
        close()
        sys.exit(0)

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)


if __name__ == "__main__":
    main()
