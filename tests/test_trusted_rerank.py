"""ACN_RERANK_URL is used (issue 35): a configured reranker reorders the best fused candidates before packing.

Before, nothing called it: the setting was read, the reranker built and never asked. The reranker here is a real
loopback stand-in that puts the candidates in reverse order of what it is given (so its order is visibly not the
fused one); a failing one leaves the fused order and the response says `rerank: unavailable`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from acn.server import create_app
from tests.conftest import make_settings, post
from tests.stand_in_http import stand_in

NS = {"agent_id": "agent-rerank", "session_id": "session-rerank"}
ITEMS = ["the staging database password rotates monthly", "the staging database lives in Frankfurt",
         "the staging database backup runs nightly at 02:00", "the staging database has 64 GB of memory"]


def test_a_configured_reranker_orders_what_is_packed_and_a_failing_one_leaves_the_fused_order(
        tmp_path: Path) -> None:
    behaviour: dict[str, Any] = {"fail": True, "best_first": []}

    def rerank(path: str, headers: dict[str, str], body: Any) -> tuple[int, Any, dict[str, str]]:
        """Score each document by its place in behaviour["best_first"] (the reverse of the fused order)."""
        if behaviour["fail"]:
            return 500, {"error": "down"}, {}
        preferred = behaviour["best_first"]
        return 200, {"results": [{"index": i, "relevance_score": 1 - preferred.index(d) / len(preferred)}
                                 for i, d in enumerate(body["documents"])]}, {}

    with stand_in(rerank) as server:
        app = create_app(make_settings(tmp_path, rerank_url=server.url + "/v1/rerank", provider_backoff_seconds=0))
        try:
            client = app.test_client()
            written = post(client, "memory_write", {**NS, "items": [{"kind": "fact", "content": c} for c in ITEMS]})
            assert written.status_code == 200, written.get_data(as_text=True)
            query = {**NS, "query": "staging database", "top_k": 4}

            failed = post(client, "memory_retrieve", query).get_json()
            fused = [m["content"] for m in failed["memories"]]
            assert server.requests and server.requests[-1]["json"]["query"] == "staging database"
            assert sorted(fused) == sorted(ITEMS) and failed["degraded"] == {"rerank": "unavailable"}
            assert all("rerank" not in m["score_parts"] for m in failed["memories"])

            behaviour.update(fail=False, best_first=list(reversed(fused)))
            reranked = post(client, "memory_retrieve", query).get_json()
            assert reranked["degraded"] == {}
            sent = server.requests[-1]["json"]["documents"]
            assert sent == fused  # the reranker reads the fused candidates, best first
            assert [m["content"] for m in reranked["memories"]] == list(reversed(fused))
            assert [m["score_parts"]["rerank"] for m in reranked["memories"]] == [1.0, 0.75, 0.5, 0.25]
            scores = [m["score"] for m in reranked["memories"]]
            assert scores == sorted(scores, reverse=True)

            # assemble packs in the reranker's order too (its memory layer lists the best first).
            assembled = post(client, "assemble", {**NS, "user_input": "staging database?", "mode": "focused",
                                                  "max_tokens": 4000}).get_json()
            shown = [s["id"] for s in assembled["sources"] if s["layer"] == "memory"]
            ids = {m["content"]: m["id"] for m in reranked["memories"]}
            assert shown[:4] == [ids[c] for c in reversed(fused)]
        finally:
            app.extensions["acn"].close()
