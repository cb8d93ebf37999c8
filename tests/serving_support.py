"""Servers for the serving tests: `python server.py`, and Debian's nginx with deploy/nginx.conf in front of gunicorn.

Everything listens on 127.0.0.1 only. nginx is started by the test (its own prefix, pid file, logs and temporary
folders under the test's folder) from the shipped site file, with only its upstream and listen addresses
rewritten. Where nginx is missing the tests skip with the reason (`make nginx` installs it), or fail under CI=true.
"""

from __future__ import annotations

import http.client
import os
import pwd
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import ROOT, free_port, missing_prerequisite, server_env, stop_process, wait_for_port

SITE = ROOT / "deploy" / "nginx.conf"
DEADLINE = 10.0  # seconds one probe may take: generous, so that a loaded machine does not fail a test
START_DEADLINE = 90.0


@dataclass
class Stack:
    """Where clients connect, and how a test plays a client of its own address."""

    name: str
    port: int
    # Through a trusted proxy at 127.0.0.1 (python server.py) the client's address is an X-Forwarded-For header;
    # through nginx it is the address a client connects from (127.0.0.x: all of 127/8 is this machine's).
    forwarded: bool
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    # Connections one untrusted address may hold (python server.py); nginx bounds a head's time instead.
    per_address: int | None = None

    def as_client(self, number: int) -> tuple[str, dict[str, str]]:
        """Return (source address, headers) of client `number` (1–250), as the server should see it."""
        if self.forwarded:
            return "127.0.0.1", {"X-Forwarded-For": f"198.51.100.{number}"}
        return f"127.0.0.{number + 1}", {}


def call(port: int, method: str, path: str, headers: dict[str, str] | None = None, body: bytes | None = None,
         source: str = "127.0.0.1", timeout: float = DEADLINE) -> tuple[int, dict[str, str], bytes]:
    """Send one request on a new connection from `source`; return status, headers and body."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout, source_address=(source, 0))
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def wait_until_answering(port: int, process: subprocess.Popen[bytes]) -> None:
    """Wait (bounded) until /healthz answers 200: gunicorn listens before its worker has built the app."""
    deadline = time.monotonic() + START_DEADLINE
    while True:
        try:
            if call(port, "GET", "/healthz")[0] == 200:
                return
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"no answer on port {port} (exit code {process.poll()})")
        time.sleep(0.2)


def nginx_binary() -> str:
    """Return Debian's nginx, or stop the test (skip, or fail under CI=true)."""
    found = shutil.which("nginx") or next((path for path in ("/usr/sbin/nginx",) if os.access(path, os.X_OK)), None)
    if found is None:
        missing_prerequisite("nginx is missing: `make nginx` as root installs Debian's package")
    return str(found)


def nginx_config(folder: Path, upstream_port: int, port: int) -> Path:
    """Write the shipped site file (upstream and listen rewritten to loopback) and a main file including it."""
    site = SITE.read_text(encoding="utf-8")
    assert site.count("server acn-replicas:8000 ") == 1 and site.count("listen 8000;") == 1
    site = site.replace("server acn-replicas:8000 ", f"server 127.0.0.1:{upstream_port} ")
    site = site.replace("listen 8000;", f"listen 127.0.0.1:{port};")
    (folder / "site.conf").write_text(site, encoding="utf-8")
    temp = {name: folder / name for name in ("body", "proxy", "fastcgi", "uwsgi", "scgi")}
    for path in temp.values():
        path.mkdir(exist_ok=True)
    main = folder / "nginx.conf"
    main.write_text(f"""
user {pwd.getpwuid(os.getuid()).pw_name};
worker_processes 1;
worker_rlimit_nofile 8192;
daemon off;
pid {folder}/nginx.pid;
error_log {folder}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {temp["body"]};
    proxy_temp_path {temp["proxy"]};
    fastcgi_temp_path {temp["fastcgi"]};
    uwsgi_temp_path {temp["uwsgi"]};
    scgi_temp_path {temp["scgi"]};
    include {folder}/site.conf;
}}
""", encoding="utf-8")
    return main


@contextmanager
def python_server(folder: Path, **env: str) -> Iterator[Stack]:
    """`python server.py` on loopback, 127.0.0.1 as its trusted proxy."""
    port = free_port()
    environment = server_env(ACN_MILVUS_URI=str(folder / "memory.db"), **env)
    process = subprocess.Popen([sys.executable, "server.py", "--port", str(port)], cwd=ROOT, env=environment,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, timeout=START_DEADLINE, process=process)
        wait_until_answering(port, process)
        yield Stack("python server.py", port, forwarded=True, processes=[process],
                    per_address=int(env.get("ACN_CONNECTIONS_PER_ADDRESS", "256")))
    finally:
        stop_process(process)


@contextmanager
def gunicorn_server(folder: Path, **env: str) -> Iterator[int]:
    """gunicorn with deploy/gunicorn.conf.py on loopback; yield its port."""
    port = free_port()
    environment = server_env(ACN_MILVUS_URI=str(folder / "memory.db"), ACN_BIND=f"127.0.0.1:{port}", **env)
    process = subprocess.Popen([sys.executable, "-m", "gunicorn", "-c", "deploy/gunicorn.conf.py"], cwd=ROOT,
                               env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, timeout=START_DEADLINE, process=process)
        wait_until_answering(port, process)
        yield port
    finally:
        stop_process(process)


@contextmanager
def nginx_in_front(folder: Path, upstream_port: int) -> Iterator[int]:
    """Debian's nginx with deploy/nginx.conf in front of `upstream_port`; yield its port."""
    binary = nginx_binary()
    port = free_port()
    main = nginx_config(folder, upstream_port, port)
    process = subprocess.Popen([binary, "-p", str(folder), "-e", str(folder / "error.log"), "-c", str(main)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, timeout=START_DEADLINE, process=process)
        yield port
    finally:
        stop_process(process)
