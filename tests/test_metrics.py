"""/metrics: Prometheus text with per-node traffic, errors by code and the context-quality signals."""

from __future__ import annotations

from flask.testing import FlaskClient

from tests.conftest import post


def sample(text: str, name: str, **labels: str) -> float:
    """Return the value of one sample line of the exposition."""
    selector = ",".join(f'{k}="{v}"' for k, v in labels.items())
    prefix = f"{name}{{{selector}}} " if labels else f"{name} "
    line = next(line for line in text.splitlines() if line.startswith(prefix))
    return float(line.rsplit(" ", 1)[1])


def test_metrics_count_requests_errors_and_quality(client: FlaskClient, ns: dict[str, str]) -> None:
    before = client.get("/metrics").get_data(as_text=True)
    assert "acn_requests_total" in before or "acn_requests" in before
    messages = [{"role": "user", "content": f"第{i}条：订单 ORD-{i:04d} 金额 {i * 10}元，请记录。"} for i in range(12)]
    assert post(client, "compact", {**ns, "messages": messages, "force": True, "keep_recent": 2,
                                    "segment_size": 5}).status_code == 200
    post(client, "memory_write", {**ns, "items": [{"kind": "fact", "content": f"订单 ORD-{i:04d}"} for i in range(8)]})
    probed = post(client, "assemble", {**ns, "user_input": "订单 ORD-0001 ORD-0002 是什么", "max_tokens": 80,
                                       "messages": [], "working_summary": "", "probes": ["ORD-0001", "ORD-9999"]})
    assert probed.status_code == 200
    assert probed.get_json()["probes"] == {"ORD-0001": True, "ORD-9999": False}
    assert post(client, "no_such_node", {}).status_code == 404
    text = client.get("/metrics").get_data(as_text=True)
    assert sample(text, "acn_requests_total", route="/v1/nodes/compact", status="200") >= 1
    assert sample(text, "acn_requests_total", route="/v1/nodes/<name>", status="404") >= 1
    assert sample(text, "acn_errors_total", code="unknown_node") >= 1
    assert sample(text, "acn_compaction_ratio_count") >= 1
    assert 0 < sample(text, "acn_compaction_ratio_sum") <= sample(text, "acn_compaction_ratio_count")
    assert sample(text, "acn_retrieval_hit_rate_count") >= 1
    assert sample(text, "acn_amnesia_probes_total", result="kept") >= 1
    assert sample(text, "acn_amnesia_probes_total", result="forgotten") >= 1
    assert sample(text, "acn_request_seconds_count", route="/v1/nodes/assemble") >= 1
