"""Production mode: gunicorn (one worker, threads) against a Milvus server URI with a token; the compose file
and the deployment guide stay consistent with the settings."""

from __future__ import annotations

import re
import signal
import subprocess
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import requests
import yaml

from acn.common.settings import ENV_PREFIX, Settings
from tests.conftest import ROOT, free_port, server_env, wait_for_port

KEY = "deploy-key-0123456789"
GUIDE = ROOT / "docs" / "DEPLOYMENT.md"
COMPOSE = ROOT / "deploy" / "docker-compose.yml"


def start_gunicorn(milvus_uri: str, port: int) -> subprocess.Popen[bytes]:
    env = server_env(ACN_MILVUS_URI=milvus_uri, ACN_MILVUS_TOKEN="root:Milvus", ACN_API_KEYS=f"{KEY}:ops",
                     ACN_BIND=f"127.0.0.1:{port}", ACN_THREADS="4", ACN_LOG_LEVEL="WARNING")
    gunicorn = Path(ROOT / ".venv" / "bin" / "gunicorn")
    process = subprocess.Popen([str(gunicorn), "-c", "deploy/gunicorn.conf.py"], cwd=ROOT, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wait_for_port(port, timeout=60, process=process)
    return process


def stop(process: subprocess.Popen[bytes]) -> tuple[int, str]:
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=45)
    assert process.stderr is not None
    errors = process.stderr.read().decode(errors="replace")
    process.stderr.close()
    return process.returncode, errors


def post(base: str, node: str, body: dict[str, Any]) -> requests.Response:
    return requests.post(f"{base}/v1/nodes/{node}", json=body, timeout=60,
                         headers={"Authorization": f"Bearer {KEY}"})


def test_gunicorn_threads_serve_concurrent_sessions_on_a_milvus_server(lite_server: str) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    agent = f"deploy-{uuid.uuid4().hex[:6]}"
    process = start_gunicorn(lite_server, port)
    try:
        # The master listens before its worker has booted (the runtime opens in the worker): the first answer waits
        # for that boot, 12 s on this 2-core machine at load 10, so it gets the nodes' 60 s, not 10.
        bare = requests.get(f"{base}/healthz", timeout=60).json()
        assert bare["ok"] and "store" not in bare and "auth" not in bare  # no key: liveness only
        health = requests.get(f"{base}/healthz", timeout=10, headers={"Authorization": f"Bearer {KEY}"}).json()
        assert health["ok"] and health["auth"] is True
        assert lite_server.split("//")[1] in str(health["store"])

        def turn(job: tuple[int, int]) -> int:
            session, number = job
            response = post(base, "record_turn", {"agent_id": agent, "session_id": f"s{session}", "messages": [
                {"role": "user", "content": f"会话{session}第{number}轮：工单号 T-{session}{number:02d}"},
                {"role": "assistant", "content": f"已记录工单 T-{session}{number:02d}"}]})
            assert response.status_code == 200, response.text
            return int(response.json()["version"])

        jobs = [(session, number) for number in range(1, 4) for session in range(4)]
        with ThreadPoolExecutor(max_workers=8) as pool:
            versions = list(pool.map(turn, jobs))
        # Concurrent turns of one session serialise: each session ends at version 3 with no update lost.
        assert sorted(versions) == sorted([1, 2, 3] * 4)
        for session in range(4):
            state = post(base, "session_state", {"agent_id": agent, "session_id": f"s{session}"}).json()
            contents = " ".join(m["content"] for m in state["buffer"])
            assert state["version"] == 3 and all(f"T-{session}{n:02d}" in contents for n in range(1, 4))
    finally:
        code, errors = stop(process)
    assert code == 0 and "Traceback" not in errors, errors
    # A new process on the same Milvus server sees everything the first one wrote.
    process = start_gunicorn(lite_server, port)
    try:
        state = post(base, "session_state", {"agent_id": agent, "session_id": "s2"}).json()
        assert state["version"] == 3
    finally:
        stop(process)


def test_compose_file_uses_only_real_settings_and_says_it_is_not_tested() -> None:
    text = COMPOSE.read_text(encoding="utf-8")
    assert "not exercised in CI" in text
    compose = yaml.safe_load(text)
    services = compose["services"]
    assert {"etcd", "minio", "milvus-standalone", "agent-context-nodes"} <= set(services)
    environment = services["agent-context-nodes"]["environment"]
    names = {name[len(ENV_PREFIX):].lower() for name in environment if name.startswith(ENV_PREFIX)}
    known = set(Settings.model_fields) | {"bind", "threads"}  # the last two are read by deploy/gunicorn.conf.py
    assert names <= known, names - known
    assert environment["ACN_MILVUS_URI"].startswith("http://milvus-standalone:19530")


def test_deployment_guide_names_real_settings_and_the_platform_steps() -> None:
    guide = GUIDE.read_text(encoding="utf-8")
    mentioned = {m.lower() for m in re.findall(r"\bACN_([A-Z_]+)\b", guide)}
    assert mentioned - (set(Settings.model_fields) | {"bind", "threads"}) == set()
    for needle in ("gunicorn -c deploy/gunicorn.conf.py", "ACN_MILVUS_TOKEN", "zillizcloud.com",
                   "SSRF_PROXY_ALLOW_PRIVATE_DOMAINS", "squid.conf.template", "FORCE_VERIFYING_SIGNATURE",
                   "/v1/dify/extension", "not exercised in CI"):
        assert needle in guide, needle
