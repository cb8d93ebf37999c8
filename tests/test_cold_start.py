"""Cold start (issue 21): what `python server.py` does to start faster, and that the first answer is a warm one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import requests

from tests.conftest import ROOT, free_port, server_env, start_server, stop_process

NAMESPACE = {"agent_id": "cold", "session_id": "s"}
TEXTS = ["订单ORD-1001的物流状态是已发货，预计3月5日送达", "发票INV-2002已经开好，抬头是上海某某公司",
         "The invoice INV-3003 was sent to billing@example.com", "客户偏好下午三点以后送货",
         "仓库在金桥路，周末不发货", "Order ORD-4004 is delayed by the storm, new date March 9"]
QUERIES = ["订单现在到哪了？", "when does ORD-4004 arrive", "发票抬头是什么"]


def run_python(code: str, timeout: float = 120) -> str:
    """Run code in a fresh interpreter from the repository root (where server.py is); return its stdout."""
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=server_env(ACN_LOG_LEVEL="ERROR"),
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_a_server_run_as_a_script_serves_with_the_collector_on_and_its_imports_frozen(tmp_path: Path) -> None:
    # server.py switches the cyclic collector off for its imports: it must be back on (or memory held in cycles
    # would never be freed) and the imports frozen (out of later scans) by the time the server listens.
    code = f"""
import gc, runpy, sys
import waitress.server

def listen(app, **kwargs):
    app.extensions["acn"].close()
    sys.setswitchinterval(60)  # no other thread runs (or allocates) until this one blocks or ends
    collections = []
    gc.collect()
    gc.callbacks.append(lambda phase, info: phase == "start" and collections.append(info["generation"]))
    for _ in range(100):  # calls that each hold 1,500 container objects at once, then free them
        held = [{{}} for _ in range(1_500)]
        del held
    print(gc.isenabled(), gc.get_freeze_count(), len(collections))
    raise SystemExit(0)

waitress.server.create_server = listen
import os
os.environ["ACN_MILVUS_URI"] = {str(tmp_path / "memory.db")!r}
os.environ["ACN_EMBEDDER"] = "none"
sys.argv = ["server.py", "--port", "0"]
runpy.run_path("server.py", run_name="__main__")
"""
    enabled, frozen, collections = run_python(code).split()
    assert enabled == "True", "the collector is still off once the server listens"
    assert int(frozen) > 50_000, "the imports were not frozen out of the collector's scans"
    # A call's own objects are freed by reference counting before a young collection looks at them (at CPython's
    # 700, two collections a call, moving what the call held towards the oldest generation: issue 47).
    assert collections == "0"


def test_importing_the_server_as_a_module_leaves_the_collector_alone() -> None:
    enabled, frozen = run_python("import gc, server; print(gc.isenabled(), gc.get_freeze_count())").split()
    assert (enabled, frozen) == ("True", "0")


def test_jieba_is_imported_without_pkg_resources_and_segments_alike() -> None:
    # jieba would import pkg_resources only to open its own files (~50 ms at every start): without it, it opens them
    # by path, and what it reads (the HMM tables used for words missing from the dictionary) is the same.
    text = "周杰伦昨天在上海开了演唱会，票务系统崩了"
    probe = f"import jieba.finalseg as f; print(json.dumps(list(f.cut({text!r}))))"
    ours = run_python(f"import json, sys\nfrom acn.app.runtime import import_jieba\nimport_jieba()\n{probe}\n"
                      "print('pkg_resources' in sys.modules)").splitlines()
    theirs = run_python(f"import json\nimport jieba\n{probe}").splitlines()
    assert ours[1] == "False", "pkg_resources was imported"
    assert json.loads(ours[0]) == json.loads(theirs[0])
    assert len(json.loads(ours[0])) > 3


def answers(base: str, session: requests.Session) -> list[list[tuple[str, float, bool]]]:
    """Each query's memories, in order: id, dense similarity, whether BM25 matched it.

    Not the BM25 value itself: until the agent's local index has loaded (in the background, after the first
    search asked for it), BM25 comes from the store, whose statistics are the whole collection's rather than the
    agent's (acn/storage/database/lite/local_index.py), so the same match scores a little differently (seen: 0.3624 vs 0.3654).
    """
    found = []
    for query in QUERIES:
        response = session.post(f"{base}/v1/nodes/memory_retrieve",
                                json={**NAMESPACE, "query": query, "top_k": 4}, timeout=120)
        assert response.status_code == 200, response.text
        found.append([(item["id"], item["score_parts"]["dense"], item["score_parts"]["bm25"] > 0)
                      for item in response.json()["memories"]])
    return found


def test_the_first_answers_after_a_cold_start_are_a_warm_servers(tmp_path: Path) -> None:
    # Start-up may load things lazily or in the background, but never answer from something half-loaded: the
    # first requests (BM25 over jieba's segments, USE vectors) rank as the same server does warm.
    env = {"ACN_EMBEDDER": "use", "ACN_EMBEDDING_BACKLOG": "off"}
    port = free_port()
    process = start_server(tmp_path, port, **env)
    base = f"http://127.0.0.1:{port}"
    try:
        with requests.Session() as session:
            items = [{"kind": "fact", "content": text} for text in TEXTS]
            written = session.post(f"{base}/v1/nodes/memory_write", json={**NAMESPACE, "items": items}, timeout=120)
            assert written.status_code == 200, written.text
    finally:
        stop_process(process)
    port = free_port()
    process = start_server(tmp_path, port, **env)
    base = f"http://127.0.0.1:{port}"
    try:
        with requests.Session() as session:
            first, warm = answers(base, session), answers(base, session)
    finally:
        stop_process(process)
    assert all(found for found in first)
    for query, (cold_answer, warm_answer) in zip(QUERIES, zip(first, warm, strict=True), strict=True):
        assert cold_answer == warm_answer, f"{query}:\n{cold_answer}\n{warm_answer}"


def test_the_gunicorn_worker_imports_the_server_with_the_collector_off_and_freezes_the_imports() -> None:
    code = """
import gc, runpy, sys
hooks = runpy.run_path("deploy/gunicorn.conf.py")
assert "acn.server" not in sys.modules
hooks["post_fork"](None, None)
print("acn.server" in sys.modules, gc.isenabled(), gc.get_freeze_count(), gc.get_threshold()[0])
"""
    imported, enabled, frozen, young = run_python(code).split()
    assert (imported, enabled, young) == ("True", "True", "2000")
    assert int(frozen) > 50_000
