"""Memory administration: paging, get with history, delete one and delete a namespace."""

from __future__ import annotations

from flask.testing import FlaskClient

from tests.conftest import assert_error, post


def seed(client: FlaskClient, ns: dict[str, str], count: int) -> list[str]:
    items = [{"kind": "fact", "content": f"记录 {i}: 参数 P{i:03d} 的值是 {i * 7}"} for i in range(count)]
    response = post(client, "memory_write", {**ns, "items": items})
    assert response.status_code == 200
    return [r["id"] for r in response.get_json()["results"]]


def test_list_pages_in_creation_order(client: FlaskClient, ns: dict[str, str]) -> None:
    ids = seed(client, ns, 12)
    seen: list[str] = []
    offset: int | None = 0
    while offset is not None:
        page = client.get("/v1/memories", query_string={"agent_id": ns["agent_id"], "limit": 5, "offset": offset})
        body = page.get_json()
        assert len(body["memories"]) <= 5
        seen += [m["id"] for m in body["memories"]]
        offset = body["next_offset"]
    assert seen == ids


def test_list_filters_by_kind(client: FlaskClient, ns: dict[str, str]) -> None:
    seed(client, ns, 2)
    post(client, "memory_write", {**ns, "items": [{"kind": "identity", "content": "我是老客户"}]})
    body = client.get("/v1/memories", query_string={"agent_id": ns["agent_id"], "kinds": "identity"}).get_json()
    assert [m["kind"] for m in body["memories"]] == ["identity"]


def test_delete_one_memory_then_no_route_returns_it(client: FlaskClient, ns: dict[str, str]) -> None:
    ids = seed(client, ns, 3)
    assert client.delete(f"/v1/memories/{ids[0]}").get_json()["deleted"] == 1
    assert_error(client.get(f"/v1/memories/{ids[0]}"), 404, "not_found")
    assert_error(client.delete(f"/v1/memories/{ids[0]}"), 404)
    listing = client.get("/v1/memories", query_string={"agent_id": ns["agent_id"]}).get_json()["memories"]
    assert ids[0] not in [m["id"] for m in listing] and len(listing) == 2
    found = post(client, "memory_retrieve", {**ns, "query": "记录 参数 P000", "top_k": 10}).get_json()["memories"]
    assert ids[0] not in [m["id"] for m in found]


def test_delete_namespace_removes_everything_of_it_only(client: FlaskClient, ns: dict[str, str]) -> None:
    seed(client, ns, 4)
    other = {**ns, "session_id": ns["session_id"] + "-other"}
    seed(client, other, 2)
    deleted = client.delete("/v1/memories", query_string=ns).get_json()["deleted"]
    assert deleted == 4
    assert post(client, "memory_retrieve", {**ns, "query": "记录 参数", "top_k": 10, "scopes": ["session"]}
                ).get_json()["memories"] == []
    left = client.get("/v1/memories", query_string={"agent_id": ns["agent_id"]}).get_json()["memories"]
    assert len(left) == 2 and all(m["session_id"] == other["session_id"] for m in left)
