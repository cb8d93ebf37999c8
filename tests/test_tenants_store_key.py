"""The store's key check does not depend on a memory row existing: a marker written when the store is created
refuses a start with no key or another key, with the reason; the store's secret keys archive ids (issue 34)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from acn.server import create_app
from acn.storage.database.base import Filter
from acn.storage.database.crypto import EncryptionKeyError
from acn.storage.database.milvus import MilvusStore
from acn.storage.database.store_facts import FACT_ROW
from tests.conftest import ROOT, make_settings, post, server_env

NS = {"agent_id": "a", "session_id": "s"}


def keyed_store_without_memories(folder: Path, key: str) -> None:
    """A store created with the key, a turn recorded, then every memory row deleted (the sessions remain)."""
    app = create_app(make_settings(folder, encryption_key=key))
    try:
        client = app.test_client()
        assert post(client, "record_turn", {**NS, "messages": [{"role": "user", "content": "我的验证码是4821"}]}
                    ).status_code == 200
        runtime = app.extensions["acn"]
        runtime.memories.delete_namespace("default", "a", None, None)
        assert runtime.memories.queries.count_in("default", "a", None, None) == 0
    finally:
        app.extensions["acn"].close()


def test_no_key_or_another_is_refused_at_start_even_with_no_memory_row(tmp_path: Path) -> None:
    key = Fernet.generate_key().decode()
    keyed_store_without_memories(tmp_path, key)
    with pytest.raises(EncryptionKeyError, match="set ACN_ENCRYPTION_KEY"):
        create_app(make_settings(tmp_path))
    with pytest.raises(EncryptionKeyError, match="not the key"):
        create_app(make_settings(tmp_path, encryption_key=Fernet.generate_key().decode()))
    # The server process says why and exits, so /healthz never answers ok over a store it cannot read.
    environment = server_env(ACN_MILVUS_URI=str(tmp_path / "memory.db"), ACN_LOG_LEVEL="WARNING")
    run = subprocess.run([sys.executable, "server.py", "--port", "0"], cwd=ROOT, env=environment, text=True,
                         capture_output=True, timeout=120)
    assert run.returncode == 2
    assert run.stderr.strip().splitlines()[-1] == ("agent-context-nodes: cannot start: this store is encrypted: set "
                                                   "ACN_ENCRYPTION_KEY to the key it was created with")
    again = create_app(make_settings(tmp_path, encryption_key=key))  # the right key still opens it
    try:
        assert post(again.test_client(), "session_state", NS).get_json()["turn"] == 1
    finally:
        again.extensions["acn"].close()


def test_a_store_from_before_markers_is_checked_by_its_sessions(tmp_path: Path) -> None:
    key = Fernet.generate_key().decode()
    keyed_store_without_memories(tmp_path, key)
    store = MilvusStore(str(tmp_path / "memory.db")).open()
    try:  # what a store written before markers holds: no fact rows
        store.delete("acn_sessions", Filter("row == {r}", {"r": FACT_ROW}))
    finally:
        store.close()
    with pytest.raises(EncryptionKeyError, match="set ACN_ENCRYPTION_KEY"):
        create_app(make_settings(tmp_path))
    with pytest.raises(EncryptionKeyError, match="not the key"):
        create_app(make_settings(tmp_path, encryption_key=Fernet.generate_key().decode()))


def test_a_plain_store_refuses_a_key_even_with_no_memory_row(tmp_path: Path) -> None:
    app = create_app(make_settings(tmp_path))
    app.extensions["acn"].close()
    with pytest.raises(EncryptionKeyError, match="created without it"):
        create_app(make_settings(tmp_path, encryption_key=Fernet.generate_key().decode()))


def test_archive_ids_are_keyed_with_the_store_secret_kept_across_restarts(tmp_path: Path) -> None:
    ids = []
    for folder in ("one", "one", "two"):
        app = create_app(make_settings(tmp_path / folder))
        try:
            answer = post(app.test_client(), "record_turn", {**NS, "messages": [{"role": "user", "content": "4821"}],
                                                             "expected_version": None})
            ids.append(answer.get_json()["archived_ids"][0])
            app.extensions["acn"].memories.delete_namespace("default", "a", None, None)
            app.extensions["acn"].sessions.delete("default", "a", None)
        finally:
            app.extensions["acn"].close()
    guessed = json.dumps(["default", "a", "s", 1, 0, None, "user", "4821"], ensure_ascii=False)
    assert "turn_" + hashlib.sha256(guessed.encode("utf-8")).hexdigest()[:40] not in ids  # not predictable
    assert ids[0] == ids[1] != ids[2]  # one secret per store, kept across restarts
