"""The operator CLI against a real server: import, list, export, show, sessions, delete."""

from __future__ import annotations

import json
import subprocess
import sys

import requests

from tests.conftest import ROOT, serving


def acn(base: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app.cli", "--url", base, *args], cwd=ROOT, input=stdin,
                          capture_output=True, text=True, timeout=120)


def test_import_list_export_show_delete_round_trip() -> None:
    with serving() as base:
        lines = "\n".join(json.dumps({"kind": "fact", "content": f"客户 C{i:03d} 的订单 ORD-{i:04d}",
                                      "meta": {"src": "crm"}}, ensure_ascii=False) for i in range(130))
        imported = acn(base, "import", "--agent", "ops", "--session", "s1", stdin=lines)
        assert imported.returncode == 0, imported.stderr
        assert "imported: 130" in imported.stderr
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
        deleted = acn(base, "delete", "--agent", "ops", "--session", "s1")
        assert "deleted: 131" in deleted.stderr
        assert acn(base, "list", "--agent", "ops").stdout == ""
