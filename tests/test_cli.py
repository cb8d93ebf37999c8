"""The operator CLI against a real server: import, list, export, show, sessions, delete."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import requests

from tests.conftest import ROOT, free_port, serving


def acn(base: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "acn.app.cli", "--url", base, *args], cwd=ROOT, input=stdin,
                          capture_output=True, text=True, timeout=120)


def test_import_list_export_show_delete_round_trip() -> None:
    with serving() as base:
        lines = "\n".join(json.dumps({"kind": "fact", "content": f"客户 C{i:03d} 的订单 ORD-{i:04d}",
                                      "meta": {"src": "crm"}}, ensure_ascii=False) for i in range(130))
        imported = acn(base, "import", "--agent", "ops", "--session", "s1", stdin=lines)
        assert imported.returncode == 0, imported.stderr
        assert "created: 130, updated: 0, unchanged: 0" in imported.stderr
        assert "\r" not in imported.stderr  # progress only on a terminal
        again = acn(base, "import", "--agent", "ops", "--session", "s1", stdin=lines)
        assert "created: 0, updated: 0, unchanged: 130" in again.stderr, again.stderr
        listed = acn(base, "list", "--agent", "ops").stdout.splitlines()
        assert len(listed) == 130 and "ORD-0000" in listed[0]
        exported = [json.loads(line) for line in acn(base, "export", "--agent", "ops").stdout.splitlines()]
        assert [m["content"] for m in exported] == [f"客户 C{i:03d} 的订单 ORD-{i:04d}" for i in range(130)]
        assert all(m["meta"] == {"src": "crm"} for m in exported)
        shown = json.loads(acn(base, "show", exported[0]["id"]).stdout)
        assert shown["id"] == exported[0]["id"]
        requests.post(f"{base}/v1/nodes/record_turn", timeout=30, json={
            "agent_id": "ops", "session_id": "s1", "messages": [{"role": "user", "content": "你好"}]})
        assert acn(base, "sessions", "--agent", "ops", "--session", "s1").stdout.startswith("v1\trecord_turn")
        missing = acn(base, "show", "mem_nothing")
        assert missing.returncode != 0 and "404 not_found" in missing.stderr and "Traceback" not in missing.stderr
        refused = acn(base, "delete", "--agent", "ops", "--session", "s1")
        assert refused.returncode == 1 and "add --yes" in refused.stderr
        assert len(acn(base, "list", "--agent", "ops").stdout.splitlines()) == 131
        deleted = acn(base, "delete", "--agent", "ops", "--session", "s1", "--yes")
        assert "deleted: 131" in deleted.stderr
        assert acn(base, "list", "--agent", "ops").stdout == ""


def rows(base: str, agent: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in acn(base, "export", "--agent", agent).stdout.splitlines()]


def test_export_then_import_into_an_empty_store_reproduces_every_row() -> None:
    ns = {"agent_id": "crm", "session_id": "s1", "user_id": "u1"}
    with serving() as source:
        def node(name: str, body: dict[str, Any]) -> dict[str, Any]:
            response = requests.post(f"{source}/v1/nodes/{name}", json={**ns, **body}, timeout=60)
            assert response.status_code == 200, response.text
            return dict(response.json())

        node("memory_write", {"items": [
            {"kind": "decision", "content": "退款走原路返回", "key": "退款方式"},
            {"kind": "identity", "content": "客户叫王芳", "scope": "user", "meta": {"src": "crm"}},
            {"kind": "fact", "content": "订单 ORD-0042 已发货", "turn_range": [1, 2]}]})
        node("memory_write", {"items": [{"kind": "decision", "content": "退款改为退到余额", "key": "退款方式"}]})
        node("record_turn", {"messages": [{"role": "user", "content": "我的订单 ORD-0042 到哪了？"},
                                          {"role": "assistant", "content": "好的，已记录。"}]})
        exported = rows(source, "crm")
        assert {m["kind"] for m in exported} >= {"decision", "identity", "fact", "turn"}
        assert any(m["superseded_by"] for m in exported) and any(m["version"] > 1 for m in exported)
        assert "好的，已记录。" in [m["content"] for m in exported if m["kind"] == "turn"]
        dump = "".join(json.dumps(m, ensure_ascii=False) + "\n" for m in exported)
    with serving() as target:
        imported = acn(target, "import", stdin=dump)
        assert imported.returncode == 0, imported.stderr
        assert f"created: {len(exported)}, updated: 0, unchanged: 0" in imported.stderr
        assert rows(target, "crm") == exported  # every field of every row, in the same order
        again = acn(target, "import", stdin=dump)
        assert f"created: 0, updated: 0, unchanged: {len(exported)}" in again.stderr
        changed = [{**exported[0], "importance": 0.123}] + exported[1:]
        edited = acn(target, "import", stdin="".join(json.dumps(m) + "\n" for m in changed))
        assert f"created: 0, updated: 1, unchanged: {len(exported) - 1}" in edited.stderr


def test_import_is_tenant_scoped_and_checks_every_field() -> None:
    keys = "key-a-0123456789abcdef:tenant-a,key-b-0123456789abcdef:tenant-b"
    with serving(ACN_API_KEYS=keys) as base:
        written = requests.post(f"{base}/v1/nodes/memory_write", timeout=60, headers={"Authorization": "Bearer key-a-0123456789abcdef"},
                                json={"agent_id": "a", "session_id": "s", "items": [{"content": "甲方的秘密"}]})
        row = written.json()["results"][0]
        stolen = requests.get(f"{base}/v1/memories/{row['id']}", timeout=30, headers={"Authorization": "Bearer key-a-0123456789abcdef"})
        memory = stolen.json()["memory"]
        # Tenant b imports a row with tenant a's id: ids are scoped by tenant, so it is b's own new row (as for an
        # id nobody holds), and a's row is untouched.
        other = requests.post(f"{base}/v1/memories/import", timeout=30, headers={"Authorization": "Bearer key-b-0123456789abcdef"},
                              json={"memories": [{**memory, "content": "被改写"}]})
        assert other.status_code == 200 and other.json()["created"] == 1, other.text
        mine = requests.get(f"{base}/v1/memories/{row['id']}", timeout=30, headers={"Authorization": "Bearer key-a-0123456789abcdef"})
        assert mine.json()["memory"]["content"] == "甲方的秘密"
        bad = requests.post(f"{base}/v1/memories/import", timeout=30, headers={"Authorization": "Bearer key-b-0123456789abcdef"},
                            json={"memories": [{**memory, "agent_id": "a' or 1==1", "extra": 1}]})
        assert bad.status_code == 422 and bad.json()["code"] == "validation_error"
        assert "memories.0.agent_id" in bad.text and "memories.0.extra" in bad.text
        huge = requests.post(f"{base}/v1/memories/import", timeout=30, headers={"Authorization": "Bearer key-b-0123456789abcdef"},
                             json={"memories": [{**memory, "id": "mem_huge", "content": "长" * 30000}]})
        assert huge.status_code == 422 and "memories.0.content" in huge.text  # 90 KB: beyond the store's VARCHAR
        anonymous = requests.post(f"{base}/v1/memories/import", timeout=30, json={"memories": [memory]})
        assert anonymous.status_code == 401


def test_clear_errors_and_usage() -> None:
    refused = acn(f"http://127.0.0.1:{free_port()}", "list", "--agent", "x")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "cannot reach the server" in refused.stderr and "connection refused" in refused.stderr
    no_id = acn("http://127.0.0.1:1", "show")
    assert no_id.returncode == 2 and "usage: acn" in no_id.stderr and "show needs a MEMORY_ID" in no_id.stderr
    not_json = acn("http://127.0.0.1:1", "import", stdin="not json\n")
    assert not_json.returncode == 1 and "line 1 is not JSON" in not_json.stderr
