"""gunicorn settings for production: `gunicorn -c deploy/gunicorn.conf.py` from the repository root.

One worker process with threads. Two reasons: without ACN_REDIS_URL the session lock that keeps concurrent
writers to one session from losing an update lives in the process, and a Milvus Lite file admits one process.
Scale with threads (ACN_THREADS), a Milvus server behind ACN_MILVUS_URI, and replicas sharing ACN_REDIS_URL; see
docs/DEPLOYMENT.md.

Always behind nginx (deploy/nginx.conf), never reachable by clients directly: a gthread thread reads its request's
head and body and writes its answer itself, so 8 clients sending a byte every 20 s, or never reading, would hold
all 8 threads. nginx buffers whole requests and answers, with deadlines (docs/DEPLOYMENT.md §1b).
"""

import gc
import importlib
import os

wsgi_app = "acn.server:create_app()"
bind = os.environ.get("ACN_BIND", "127.0.0.1:8000")
# The app decides which Host names it answers by default (ACN_ALLOWED_HOSTS) from the address it is bound to;
# under gunicorn that is ACN_BIND, not ACN_HOST, so pass it on (an explicit ACN_HOST still wins).
os.environ.setdefault("ACN_HOST", bind.rpartition(":")[0] if ":" in bind and not bind.startswith("unix:") else bind)
workers = 1
worker_class = "gthread"
threads = int(os.environ.get("ACN_THREADS", "8"))
# record_turn may compact a long session; LLM compaction adds its provider timeout.
timeout = 120
graceful_timeout = 30
# gunicorn's own use of X-Forwarded-Proto (wsgi.url_scheme) from the same proxies the app believes; nobody's
# when ACN_TRUSTED_PROXIES is empty (gunicorn's default would be any local process's).
forwarded_allow_ips = os.environ.get("ACN_TRUSTED_PROXIES", "")
# Access logs add nothing to the server's own JSON request logs.
accesslog = None


def post_fork(server, worker):  # noqa: ARG001 - gunicorn's hook signature
    """In the worker, before it builds the app: import the server with the cyclic collector off, then freeze the
    imports and switch it back on (server.freeze_imports: ~0.2 s of CPU less at every start, as `python server.py`).
    """
    gc.disable()
    importlib.import_module("acn.server").freeze_imports()


def post_worker_init(worker):
    """Load the MCP SDK and build its tools off the request path (acn/app/mcp_route.py; /readyz waits for it)."""
    extensions = getattr(getattr(worker, "wsgi", None), "extensions", {})
    endpoint, warmer = extensions.get("acn_mcp"), getattr(extensions.get("acn"), "warmer", None)
    if endpoint is not None:  # after the warmer's first index, which a request before /readyz may wait for
        endpoint.prepare_in_background(after=warmer.first_loaded if warmer is not None else None)


def worker_exit(server, worker):  # noqa: ARG001 - gunicorn's hook signature
    """Flush and close the store when the worker stops (SIGTERM, SIGINT or a restart)."""
    app = getattr(worker, "wsgi", None)
    runtime = getattr(app, "extensions", {}).get("acn")
    if runtime is not None:
        runtime.close()
