"""One default embedder everywhere (issue 28): `use` when ACN_EMBEDDER is not set, for `python server.py` and the
app factory gunicorn runs; and a store written under the old default (`none`) keeps every memory after the
upgrade (acn/storage/repositories/row_moves.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import requests

from acn.common.settings import Settings
from acn.server import create_app
from acn.storage.database.base import Filter
from acn.storage.database.memory_rows import EMBEDDED_FIELD, memory_spec
from acn.storage.database.store_facts import read_fact, write_fact
from acn.storage.repositories.row_moves import DONE, fact_name
from tests.conftest import ROOT, free_port, make_settings, post, server_env, stop_process, wait_for_port

NS = {"agent_id": "upgrade", "session_id": "s1", "user_id": "u1"}
FACTS = ["用户的女儿下个月在杭州参加钢琴比赛", "The user's passport number ends in 4471",
         "用户对花生过敏，点菜时要避开"]


def test_settings_default_to_use_when_acn_embedder_is_not_set() -> None:
    assert Settings().embedder == "use"
    assert Settings.from_env({}).embedder == "use"
    assert Settings.from_env({"ACN_EMBEDDER": "none"}).embedder == "none"


def test_python_server_py_runs_use_when_nothing_is_set(tmp_path: Path) -> None:
    # server_env sets the tests' BM25-only default: removed here, as an operator's environment would not have it.
    environment = {k: v for k, v in server_env(ACN_MILVUS_URI=str(tmp_path / "memory.db"),
                                               ACN_LOG_LEVEL="WARNING").items() if k != "ACN_EMBEDDER"}
    port = free_port()
    process = subprocess.Popen([sys.executable, "server.py", "--port", str(port)], cwd=ROOT, env=environment,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, timeout=60, process=process)
        base = f"http://127.0.0.1:{port}"
        assert requests.get(f"{base}/healthz", timeout=10).json()["embedder"] == "use"
        written = requests.post(f"{base}/v1/nodes/memory_write", json={**NS, "items": [{"content": FACTS[0]}]},
                                timeout=30)
        assert written.status_code == 200, written.text
        found = requests.post(f"{base}/v1/nodes/memory_retrieve", json={**NS, "query": "女儿的比赛在哪里"},
                              timeout=30).json()["memories"]
        assert found[0]["content"] == FACTS[0]
        assert found[0]["score_parts"]["dense"] > 0  # found by the USE vectors too, not BM25 alone
    finally:
        stop_process(process)


def test_the_app_factory_gunicorn_runs_uses_use_when_nothing_is_set(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [k for k in os.environ if k.startswith("ACN_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("ACN_MILVUS_URI", str(tmp_path / "memory.db"))
    monkeypatch.setenv("ACN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ACN_LOG_LEVEL", "WARNING")
    app = create_app()  # deploy/gunicorn.conf.py: wsgi_app = "acn.server:create_app()"
    runtime = app.extensions["acn"]
    try:
        assert runtime.settings.embedder == "use"
        assert runtime.memories.embedder is not None and runtime.memories.embedder.name == "use"
        assert runtime.memories.spec.name == memory_spec(runtime.settings.collection_prefix, 512).name
    finally:
        runtime.close()


def write_under_none(folder: Path) -> list[str]:
    """Write memories and a recorded turn as a release whose default was `none` did; return the memory ids."""
    app = create_app(make_settings(folder, embedder="none"))
    runtime = app.extensions["acn"]
    try:
        client = app.test_client()
        written = post(client, "memory_write", {**NS, "items": [{"content": text} for text in FACTS]})
        assert written.status_code == 200, written.get_data(as_text=True)
        recorded = post(client, "record_turn", {**NS, "messages": [
            {"role": "user", "content": "我家的猫叫豆包，今年三岁了"}, {"role": "assistant", "content": "记住了"}]})
        assert recorded.status_code == 200, recorded.get_data(as_text=True)
        assert runtime.memories.spec.name == memory_spec(runtime.settings.collection_prefix, 0).name
        return [r["id"] for r in written.get_json()["results"]]
    finally:
        runtime.close()


def upgraded_settings(folder: Path, **overrides: Any) -> Settings:
    """Settings of the upgraded release with nothing set but the store: the default embedder."""
    values: dict[str, Any] = {"milvus_uri": str(folder / "memory.db"), "log_level": "WARNING",
                              "cache_dir": str(folder / "cache"), **overrides}
    return Settings(**values)


def test_a_store_written_under_none_keeps_every_memory_after_the_default_became_use(tmp_path: Path) -> None:
    ids = write_under_none(tmp_path)
    app = create_app(upgraded_settings(tmp_path))
    runtime = app.extensions["acn"]
    try:
        assert runtime.settings.embedder == "use"
        client = app.test_client()
        listed = client.get("/v1/memories", query_string={"agent_id": NS["agent_id"], "limit": 100}).get_json()
        assert {m["id"] for m in listed["memories"]} >= set(ids)
        found = post(client, "memory_retrieve", {**NS, "query": "我对什么过敏"}).get_json()["memories"]
        assert found and found[0]["content"] == FACTS[2]
        context = post(client, "assemble", {**NS, "mode": "focused", "user_input": "我的猫叫什么名字？",
                                           "max_tokens": 1000}).get_json()
        assert "豆包" in context["memory_text"] + context["history_text"]
        # The backlog fills the carried rows' vectors: every row then holds its own, and dense search finds them.
        assert runtime.backlog is not None and runtime.backlog.drain(timeout=60)
        rows = runtime.memories.store.query(runtime.memories.spec.name, Filter(""), fields=["id", EMBEDDED_FIELD],
                                            limit=100)
        assert rows and {row[EMBEDDED_FIELD] for row in rows} == {1}
        again = post(client, "memory_retrieve", {**NS, "query": "which digits does my passport number end with"}).get_json()["memories"]
        assert again[0]["content"] == FACTS[1] and again[0]["score_parts"]["dense"] > 0
        assert read_fact(runtime.store, runtime.sessions.spec.name, fact_name(runtime.memories.spec.name)) == DONE
        count = len(rows)
    finally:
        runtime.close()
    # The next start copies nothing again (a memory deleted meanwhile stays deleted).
    app = create_app(upgraded_settings(tmp_path))
    runtime = app.extensions["acn"]
    try:
        client = app.test_client()
        assert client.delete(f"/v1/memories/{ids[0]}").get_json()["deleted"] == 1
    finally:
        runtime.close()
    app = create_app(upgraded_settings(tmp_path))
    runtime = app.extensions["acn"]
    try:
        rows = runtime.memories.store.query(runtime.memories.spec.name, Filter(""), fields=["id"], limit=100)
        assert len(rows) == count - 1
    finally:
        runtime.close()


def test_a_copy_cut_short_is_finished_at_the_next_start(tmp_path: Path) -> None:
    # A start killed during the copy left the fact "from <source>": the next start copies again (same rows).
    write_under_none(tmp_path)
    settings = upgraded_settings(tmp_path, embedding_backlog="off")  # embedded during the copy
    app = create_app(settings)
    runtime = app.extensions["acn"]
    source = memory_spec(settings.collection_prefix, 0).name
    target = runtime.memories.spec.name
    write_fact(runtime.store, runtime.sessions.spec.name, fact_name(target), "from " + source)
    runtime.memories.delete_namespace("default", NS["agent_id"], None, None)  # as if the copy had not got there
    runtime.close()
    app = create_app(settings)
    runtime = app.extensions["acn"]
    try:
        rows = runtime.memories.store.query(target, Filter(""), fields=["id", EMBEDDED_FIELD], limit=100)
        assert len(rows) >= len(FACTS) and {row[EMBEDDED_FIELD] for row in rows} == {1}
        assert read_fact(runtime.store, runtime.sessions.spec.name, fact_name(target)) == DONE
    finally:
        runtime.close()
