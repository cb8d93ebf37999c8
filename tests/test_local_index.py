"""The in-process search index selects the rows the store selects, ranks them as the store does, and
follows every write.

With a Lite file this process searches an agent's rows in memory (acn/storage/database/lite/local_index.py) instead of asking
Milvus Lite. These tests hold it to the store: the same filters select the same rows (checked against real
Lite queries), BM25 puts the same rows on top (checked against real Lite searches), and a write, supersede or
delete through any path shows in the next search.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flask import Flask
from flask.testing import FlaskClient

from acn.common.auth import DEFAULT_TENANT
from acn.common.models import Memory, Namespace
from acn.storage.database.base import CollectionSpec, Filter
from acn.storage.database.lite.index_rows import bm25_scores, stored_row
from acn.storage.database.lite.local_index import K1, B, LocalIndex
from acn.storage.database.lite.predicate import UnsupportedFilter, predicate
from acn.storage.database.memory_rows import (
    client_id,
    kinds_filter,
    live_filter,
    memory_spec,
    new_memory_id,
    scope_filter,
    to_record,
)
from acn.storage.database.milvus import MilvusStore
from acn.storage.repositories.memories import MemoryRepository
from bench.seed_suite import generate
from tests.conftest import make_settings, post

AGENTS = ("a1", "a2", "a3")
KINDS = ("turn", "fact", "decision", "preference")


def random_memory(rng: random.Random, index: int) -> Memory:
    agent = rng.choice(AGENTS)
    return Memory(id=f"m{index:04d}", kind=rng.choice(KINDS), content=f"记录 {index} 内容 row {index}",
                  scope=rng.choice(("session", "user", "agent", "shared")), agent_id=agent,
                  session_id=rng.choice(("s1", "s2")), user_id=rng.choice((None, "u1", "u2")),
                  created_at=index, updated_at=index, version=1, importance=rng.choice((0.3, 5.0, 9.0)),
                  valid_to=rng.choice((None, None, 77)), turn_range=[index % 7, index % 7])


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A Lite collection of memories of three agents, every scope and kind, some superseded."""
    store = MilvusStore(str(tmp_path_factory.mktemp("predicate") / "p.db")).open()
    spec = memory_spec("pred", 0)
    store.ensure(spec)
    rng = random.Random(5)
    records = [to_record(random_memory(rng, i), "t1" if i % 5 else "t2", None) for i in range(300)]
    store.insert(spec.name, records)
    store.flush()
    yield store, spec, records
    store.close()


def filters() -> list[Filter]:
    """The filters the repositories build, over several namespaces, plus each operator the grammar has."""
    found = []
    for agent in AGENTS:
        for session, user in (("s1", None), ("s2", "u1")):
            namespace = Namespace(agent_id=agent, session_id=session, user_id=user)
            for scopes in (None, ["session"], ["agent", "shared"]):
                for include_superseded in (False, True):
                    found.append(Filter("tenant == {tenant}", {"tenant": "t1"})
                                 .and_(scope_filter(namespace, scopes)).and_(live_filter(include_superseded))
                                 .and_(kinds_filter(None, exclude_turns=True)))
            found.append(scope_filter(namespace).and_(kinds_filter(["turn", "fact"], exclude_turns=False)))
    found += [Filter("importance >= 5 and not (kind in {k})", {"k": ["turn"]}),
              Filter('turn_from in [1, 3] and kind != "fact"'), Filter("created_at < 40 or created_at > 290"),
              Filter("user_id not in {u}", {"u": ["u1"]}), Filter("valid_to == 0 and importance <= 0.3"),
              Filter("")]
    return found


def test_filters_select_the_rows_the_store_selects(seeded: Any) -> None:
    store, spec, records = seeded
    for where in filters():
        stored = {row["id"] for row in store.query(spec.name, where, fields=["id"], limit=1000)}
        matches = predicate(where)
        assert {r["id"] for r in records if matches(stored_row(r))} == stored, where.template


def test_held_rows_select_the_rows_the_store_selects(seeded: Any) -> None:
    # The index holds each row as a tuple and tests it by position (predicate.tuple_predicate): the same rows as
    # the store's query, for every filter the repositories build.
    store, spec, records = seeded
    index = LocalIndex(0)
    for record in records:
        index.put_row(record, tokenize=False)
    for where in filters():
        stored = {client_id(str(row["id"])) for row in store.query(spec.name, where, fields=["id"], limit=1000)}
        assert {m.id for m in index.select(where)} == stored, where.template
        assert {row["id"] for row in index.records(where, ["id", "kind"])} == stored, where.template


@pytest.mark.parametrize("template", ['content like "退%"', "json_contains(doc, 1)", "agent_id ==",
                                      "agent_id == {a} and", "(kind == \"x\"", "kind = 1", "kind in 3"])
def test_syntax_outside_the_grammar_is_refused(template: str) -> None:
    with pytest.raises(UnsupportedFilter):
        predicate(Filter(template, {"a": "x"}))(to_record(random_memory(random.Random(1), 1), "t1", None))


def index_of(texts: list[str]) -> tuple[LocalIndex, list[dict[str, Any]]]:
    index, rows = LocalIndex(0), []
    for i, text in enumerate(texts):
        memory = Memory(id=f"d{i}", kind="turn", content=text, scope="session", agent_id="a", session_id="s",
                        created_at=i, updated_at=i, version=1, importance=1.0)
        row = {"id": memory.id, "content": text, "kind": "turn"}
        index.put(memory, row)
        rows.append(row)
    return index, rows


def test_bm25_ranks_as_the_store_does(tmp_path: Path) -> None:
    # Chinese sessions of the seed suite (with their tool JSON) and their questions: the best hit is the
    # store's best hit, and the top 10 are the store's top 10 (statistics are the same when one group fills
    # the collection; only ties may order differently).
    sessions = generate(4, 2)
    texts = [m["content"] for s in sessions for turn in s.turns for m in turn if m.get("content")]
    questions = [p.question for s in sessions for p in s.probes] + ["超时", "订单号是多少", "VIP-20391 的会员"]
    store = MilvusStore(str(tmp_path / "rank.db")).open()
    try:
        store.ensure(CollectionSpec(name="r", scalar_fields={"kind": "varchar"}, text_field="content"))
        index, rows = index_of(texts)
        store.insert("r", rows)
        store.flush()
        where = Filter('kind == "turn"')
        agree = overlap = 0.0
        for question in questions:
            lite = [h.id for h in store.search_text("r", question, limit=10, where=where, fields=["id"]) if h.score > 0]
            mine = [m.id for m, _ in index.search_text(question, where, 10)]
            assert len(mine) == len(lite), question
            agree += bool(lite) and lite[0] == mine[0]
            overlap += len(set(lite) & set(mine)) / max(1, len(lite))
        assert agree / len(questions) >= 0.9
        assert overlap / len(questions) >= 0.9
    finally:
        store.close()


def test_bm25_scores_add_each_terms_share_as_the_per_term_passes_did_to_the_bit() -> None:
    # bm25_scores sums every term's entries in one bincount; the index used to add one term at a time
    # (`scores[slots] += ...`). Random postings (a slot at most once per term, as _post writes them), repeated
    # query terms, slots no term matches: every score equals the per-term sum exactly, not just closely.
    rng = np.random.default_rng(47)
    for _ in range(50):
        count = int(rng.integers(1, 3000))
        norm = K1 * (1 - B + B * rng.integers(1, 60, count) / rng.uniform(5, 40))
        postings = []
        for _ in range(int(rng.integers(0, 12))):
            slots = rng.choice(count, size=int(rng.integers(1, count + 1)), replace=False).astype(np.int32)
            tfs = rng.integers(1, 6, len(slots)).astype(np.int32)
            postings.append((np.column_stack((slots, tfs)).ravel(), float(rng.integers(1, 3)) * rng.uniform(0.01, 9)))
        expected = np.zeros(count, dtype=np.float64)
        for posting, idf in postings:
            slots, tfs = posting[0::2], posting[1::2].astype(np.float64)
            expected[slots] += idf * tfs * (K1 + 1) / (tfs + norm[slots])
        assert bm25_scores(postings, count, norm, K1).tobytes() == expected.tobytes()


def test_dense_search_is_cosine_over_the_filtered_rows() -> None:
    index = LocalIndex(3)
    for i, (vector, kind) in enumerate([([1, 0, 0], "fact"), ([0.9, 0.1, 0], "turn"), ([0, 1, 0], "fact"),
                                        ([-1, 0, 0], "fact")]):
        memory = Memory(id=f"v{i}", kind=kind, content=f"v{i}", scope="session", agent_id="a", session_id="s",
                        created_at=i, updated_at=i, version=1, importance=1.0)
        index.put(memory, {"id": memory.id, "kind": kind, "dense": vector})
    hits = index.search_dense([2, 0, 0], Filter('kind == "fact"'), 2)
    assert [(m.id, round(score, 3)) for m, score in hits] == [("v0", 1.0), ("v2", 0.0)]
    index.put(Memory(id="v2", kind="fact", content="v2", scope="session", agent_id="a", session_id="s",
                     created_at=2, updated_at=3, version=2, importance=1.0), {"id": "v2", "kind": "fact",
                                                                                 "dense": [1, 1, 0]})
    assert [m.id for m, _ in index.search_dense([2, 0, 0], Filter('kind == "fact"'), 3)] == ["v0", "v2", "v3"]


def fact(namespace: Namespace, text: str, *, scope: str = "session", **extra: Any) -> Memory:
    return Memory(id=new_memory_id(), kind="fact", content=text, scope=scope, agent_id=namespace.agent_id,
                  session_id=namespace.session_id, created_at=1, updated_at=1, version=1, importance=5.0, **extra)


def found(memories: MemoryRepository, namespace: Namespace, query: str) -> list[str]:
    where = scope_filter(namespace).and_(live_filter(False)).and_(kinds_filter(None, exclude_turns=True))
    hits = memories.search(DEFAULT_TENANT, query, where, limit=20, within=namespace)
    return sorted(s.memory.content for s in hits if s.bm25 > 0)


def test_searches_follow_every_write_after_the_index_is_loaded(app: Flask, ns: dict[str, str]) -> None:
    memories: MemoryRepository = app.extensions["acn"].memories
    me, other = Namespace(**ns), Namespace(agent_id=ns["agent_id"] + "-x", session_id=ns["session_id"])
    first = fact(me, "仓库地址在张江路")
    memories.save(DEFAULT_TENANT, [first], new_ids={first.id})
    assert found(memories, me, "仓库地址") == ["仓库地址在张江路"]  # the index is loaded now
    memories.save(DEFAULT_TENANT, [fact(me, "备用仓库地址在金桥路")])
    memories.save(DEFAULT_TENANT, [fact(other, "总部仓库地址在虹桥", scope="shared"),
                                   fact(other, "别人的仓库地址在松江")])
    my_other_session = Namespace(agent_id=me.agent_id, session_id=me.session_id + "-2")
    memories.save(DEFAULT_TENANT, [fact(my_other_session, "另一会话的仓库地址在闵行"),
                                   fact(my_other_session, "代理级的仓库地址在嘉定", scope="agent")])
    assert found(memories, me, "仓库地址") == ["仓库地址在张江路", "代理级的仓库地址在嘉定", "备用仓库地址在金桥路",
                                             "总部仓库地址在虹桥"]
    memories.save(DEFAULT_TENANT, [first.model_copy(update={"valid_to": 5, "superseded_by": "later"})])
    assert found(memories, me, "仓库地址") == ["代理级的仓库地址在嘉定", "备用仓库地址在金桥路", "总部仓库地址在虹桥"]
    shared = next(s.memory for s in memories.search(DEFAULT_TENANT, "虹桥", scope_filter(me), limit=5,
                                                  within=me))
    memories.delete_ids(DEFAULT_TENANT, [shared.id])
    assert found(memories, me, "仓库地址") == ["代理级的仓库地址在嘉定", "备用仓库地址在金桥路"]
    memories.delete_namespace(DEFAULT_TENANT, me.agent_id, None, None)
    assert found(memories, me, "仓库地址") == []


class WriteDuringLoad(MilvusStore):
    """A real Lite store that, once, lets a write land right after the agent's rows were read for an index."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.during_load: Any = None

    def query(self, collection: str, where: Filter, **kwargs: Any) -> list[dict[str, Any]]:
        rows = super().query(collection, where, **kwargs)
        if self.during_load is not None and 'scope == "shared"' in where.template:
            write, self.during_load = self.during_load, None
            write()
        return rows


def test_a_write_landing_while_the_index_loads_is_not_lost(tmp_path: Path) -> None:
    store = WriteDuringLoad(str(tmp_path / "race.db")).open()
    # The scan-based load (a server process, stale or too-long member pages): with member pages a session's index
    # loads by id, and the same replay of writes that landed meanwhile (ReadCache._install_loaded) covers it.
    memories = MemoryRepository(store, prefix="race", embedder=None, warm_in_background=False, member_pages=False)
    memories.open()
    namespace = Namespace(agent_id="racer", session_id="s")
    try:
        memories.save(DEFAULT_TENANT, [fact(namespace, "并发写入之前的记录")])
        late = fact(namespace, "并发写入时落地的记录")
        store.during_load = lambda: memories.save(DEFAULT_TENANT, [late])
        both = ["并发写入之前的记录", "并发写入时落地的记录"]
        assert found(memories, namespace, "并发写入") == both  # this search loaded the index, the write came after
        assert store.during_load is None
        assert found(memories, namespace, "并发写入") == both
    finally:
        store.close()


def test_retrieve_answers_the_same_from_memory_and_from_a_server(client: FlaskClient, lite_server: str,
                                                                 tmp_path: Path, ns: dict[str, str]) -> None:
    # The same writes into this process's Lite file (searched in memory) and into a Milvus server (searched
    # by the store): every retrieve returns the same memories in the same order.
    from acn.server import create_app

    other = {**ns, "agent_id": ns["agent_id"] + "-other"}
    batches = [(ns, [{"kind": "fact", "content": "客户张伟的会员号是VIP-20391"},
                     {"kind": "decision", "content": "对账接口超时设为30秒", "key": "超时"},
                     {"kind": "preference", "content": "客户不要电话回访，只接受短信"}]),
               (other, [{"kind": "knowledge", "content": "退货运费由商家承担", "scope": "shared"},
                        {"kind": "fact", "content": "另一个客户的会员号是VIP-11111"}]),
               (ns, [{"kind": "decision", "content": "对账接口超时改为45秒", "key": "超时"},
                     {"kind": "fact", "content": "订单A1234的金额是3,200元", "scope": "agent"}])]
    questions = ["会员号是多少", "超时是多少？", "回访方式", "退货运费谁出", "订单金额", "VIP"]
    served = create_app(make_settings(tmp_path, milvus_uri=lite_server))
    try:
        remote = served.test_client()
        answers: dict[str, list[list[str]]] = {"local": [], "server": []}
        for side, target in (("local", client), ("server", remote)):
            for namespace, items in batches:
                assert post(target, "memory_write", {**namespace, "items": items}).status_code == 200
            if side == "local":  # searched in memory from the first question (else the store answers until warm)
                client.application.extensions["acn"].memories.cache.local_index(DEFAULT_TENANT, Namespace(**ns),
                                                                                  wait=True)
            for question in questions:
                body = post(target, "memory_retrieve", {**ns, "query": question, "top_k": 5}).get_json()
                answers[side].append([m["content"] for m in body["memories"]])
            by_key = post(target, "memory_retrieve", {**ns, "query": "超时", "key": "超时", "include_superseded": True,
                                                       "trigger": "always"}).get_json()
            answers[side].append(sorted(m["content"] for m in by_key["memories"]))
            snapshot = post(target, "assemble", {**ns, "user_input": "继续", "mode": "snapshot", "max_tokens": 2000})
            answers[side].append([snapshot.get_json()["memory_text"]])
        assert answers["local"] == answers["server"]
        assert answers["local"][1][0] == "对账接口超时改为45秒"
        assert answers["local"][-2] == ["对账接口超时改为45秒", "对账接口超时设为30秒"]
        assert "只接受短信" in answers["local"][-1][0] and "30秒" not in answers["local"][-1][0]
        assert not any("VIP-11111" in text for found_ in answers["local"] for text in found_)
    finally:
        served.extensions["acn"].close()


def test_a_filter_the_index_cannot_evaluate_is_answered_by_the_store(app: Flask, ns: dict[str, str]) -> None:
    memories: MemoryRepository = app.extensions["acn"].memories
    me = Namespace(**ns)
    memories.save(DEFAULT_TENANT, [fact(me, "仓库地址在张江路"), fact(me, "发票抬头是星辰科技")])
    assert found(memories, me, "仓库") == ["仓库地址在张江路"]  # the session's index is loaded
    where = scope_filter(me).and_(Filter('content like "发票%"'))
    assert [m.content for m in memories.find(DEFAULT_TENANT, where, limit=10, within=me)] == ["发票抬头是星辰科技"]
    hits = memories.search(DEFAULT_TENANT, "发票抬头", where, limit=5, within=me)
    assert [s.memory.content for s in hits if s.bm25 > 0] == ["发票抬头是星辰科技"]


def test_new_rows_are_tokenized_off_the_request_path(fresh_app: Flask) -> None:
    # A write returns before its text is segmented; a background thread does it, and a search arriving
    # first does it itself. Either way the row is found.
    import time

    memories: MemoryRepository = fresh_app.extensions["acn"].memories
    namespace = Namespace(agent_id="tok", session_id="s")
    memories.save(DEFAULT_TENANT, [fact(namespace, "第一条：仓库在张江路")])
    assert found(memories, namespace, "仓库") == ["第一条：仓库在张江路"]  # loads the session's index
    assert memories.cache is not None
    index = memories.cache.local_index(DEFAULT_TENANT, namespace, wait=True)
    assert index is not None
    memories.save(DEFAULT_TENANT, [fact(namespace, f"第{n}条：发票抬头是星辰科技{n}号") for n in range(2, 40)])
    deadline = time.monotonic() + 5
    while index.pending() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert index.pending() == 0
    memories.save(DEFAULT_TENANT, [fact(namespace, "第四十条：退款走原路")])
    assert found(memories, namespace, "退款原路") == ["第四十条：退款走原路"]


def test_the_index_can_be_turned_off(tmp_path: Path, ns: dict[str, str]) -> None:
    from acn.server import create_app

    app = create_app(make_settings(tmp_path, local_index_rows=0))
    try:
        client = app.test_client()
        write = post(client, "memory_write", {**ns, "items": [{"kind": "fact", "content": "仓库地址在张江路"}]})
        assert write.status_code == 200
        body = post(client, "memory_retrieve", {**ns, "query": "仓库地址", "top_k": 3}).get_json()
        assert [m["content"] for m in body["memories"]] == ["仓库地址在张江路"]
        assert app.extensions["acn"].memories.cache.indexes == {}
    finally:
        app.extensions["acn"].close()


def test_a_distinct_index_search_keeps_what_one_per_text_keeps_of_the_full_ranking() -> None:
    # Texts of different lengths (no two score alike), each stored a few times: the index's distinct search
    # and one_per_text over the plain ranking pick the same copies in the same order, text and dense.
    from acn.providers.embedders import HashEmbedder
    from acn.storage.database.memory_rows import one_per_text

    embedder, rng = HashEmbedder(), random.Random(21)
    texts = [f"退款 refund {'原卡 ' * n}note {n}" for n in range(1, 13)]
    index = LocalIndex(embedder.dim)
    for i in range(80):
        text = rng.choice(texts)
        memory = Memory(id=f"d{i:03d}", kind="turn", content=text, scope="session", agent_id="a",
                        session_id="s", created_at=i, updated_at=i, version=1, importance=3.0)
        index.put(memory, {**to_record(memory, "t1", None), "dense": embedder.embed(text)})
    everything = Filter("")
    for limit in (1, 3, 5, 12, 20):
        plain = index.search_text("退款 原卡", everything, 100)
        assert index.search_text("退款 原卡", everything, limit, distinct=True) == one_per_text(plain, limit)
        vector = embedder.embed("refund 原卡 note")
        dense = index.search_dense(vector, everything, 100)
        assert [m.id for m, _ in index.search_dense(vector, everything, limit, distinct=True)] == \
            [m.id for m, _ in one_per_text(dense, limit)]


def test_a_subset_keeps_the_rows_accepted_as_searchable_as_before() -> None:
    index = LocalIndex(2)
    for i, (scope, text, vector) in enumerate([("session", "仓库在张江", [1, 0]), ("agent", "仓库在金桥", [0.8, 0.2]),
                                               ("shared", "运费规则", [0, 1])]):
        memory = Memory(id=f"k{i}", kind="fact", content=text, scope=scope, agent_id="a", session_id="s",
                        created_at=i, updated_at=i, version=1, importance=1.0)
        index.put(memory, {"id": memory.id, "kind": "fact", "scope": scope, "dense": vector}, tokenize=i != 2)
    part = index.subset(Filter('scope != "session"'))
    assert sorted(m.id for m in part.select(Filter(""))) == ["k1", "k2"]
    assert [m.id for m, _ in part.search_text("仓库", Filter(""), 5)] == ["k1"]  # tokenized as in the source
    assert [m.id for m, _ in part.search_text("运费", Filter(""), 5)] == ["k2"]  # tokenized on first search
    assert [m.id for m, _ in part.search_dense([1, 0], Filter(""), 1)] == ["k1"]  # vectors came along
    assert len(index) == 3 and [m.id for m, _ in index.search_text("仓库", Filter(""), 5)] == ["k0", "k1"]


class CountingStore(MilvusStore):
    """A real Lite store that counts the scans of a session's readable rows and can write during the query
    that lists an agent's sessions."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.group_scans = 0
        self.during_listing: Any = None

    def query(self, collection: str, where: Filter, **kwargs: Any) -> list[dict[str, Any]]:
        if 'scope == "shared"' in where.template:
            self.group_scans += 1
        rows = super().query(collection, where, **kwargs)
        # The query that lists an agent's sessions, or the one that reads their memory heads (what tells a new
        # session's reader whether any rows exist: acn/storage/repositories/memory_heads.py).
        listing = kwargs.get("fields") == ["session_id"] or "head_ids" in where.template
        if self.during_listing is not None and listing:
            write, self.during_listing = self.during_listing, None
            write()
        return rows


def readable(memories: MemoryRepository, namespace: Namespace) -> list[str]:
    """Return every row a session can read, as the repository serves it."""
    return sorted(m.content for m in memories.find(DEFAULT_TENANT, Filter(""), limit=1000, within=namespace))


def test_a_new_session_of_a_known_agent_is_read_without_a_scan(tmp_path: Path) -> None:
    store = CountingStore(str(tmp_path / "sessions.db")).open()
    memories = MemoryRepository(store, prefix="sib", embedder=None, warm_in_background=False)
    memories.open()
    scanned = MemoryRepository(store, prefix="sib", embedder=None, index_rows=0)  # no index: the store answers
    s1, s2, s3, s4 = (Namespace(agent_id="bot", session_id=f"s{i}", user_id="u1") for i in range(1, 5))
    stranger = Namespace(agent_id="other-bot", session_id="x")
    try:
        memories.save(DEFAULT_TENANT, [fact(s1, "会话一的订单号是A-1"), fact(s1, "代理级的仓库在张江", scope="agent"),
                                       fact(s1, "用户级的偏好是短信", scope="user", user_id="u1"),
                                       fact(s2, "会话二的订单号是B-2"), fact(stranger, "共享的运费规则", scope="shared"),
                                       fact(stranger, "别的代理的会话记录")])
        assert readable(memories, s1) == readable(scanned, s1)
        assert readable(memories, s2) == readable(scanned, s2)  # s2 holds rows: it is scanned
        scans = store.group_scans
        # s3 has no rows of its own: s1's index minus s1's session rows, read without scanning the store...
        served = readable(memories, s3)
        assert found(memories, s3, "仓库") == ["代理级的仓库在张江"]
        assert store.group_scans == scans
        # ...and the same rows a scan finds.
        assert served == readable(scanned, s3) == ["代理级的仓库在张江", "共享的运费规则", "用户级的偏好是短信"]
        assert found(scanned, s3, "仓库") == ["代理级的仓库在张江"]
        # Writes reach the view built from a sibling, and stay where they belong.
        memories.save(DEFAULT_TENANT, [fact(s3, "会话三的订单号是C-3"), fact(s2, "新的代理级规则", scope="agent")])
        assert readable(memories, s3) == readable(scanned, s3)
        assert "会话三的订单号是C-3" in readable(memories, s3) and "会话三的订单号是C-3" not in readable(memories, s1)
        assert readable(memories, s4) == readable(scanned, s4)
        assert "会话三的订单号是C-3" not in readable(memories, s4) and "新的代理级规则" in readable(memories, s4)
        # A delete forgets what is known; the next new session is read from the store again, correctly.
        memories.delete_namespace(DEFAULT_TENANT, "bot", "s1", None)
        assert readable(memories, s1) == readable(scanned, s1)
        assert readable(memories, s4) == readable(scanned, s4)
    finally:
        store.close()


def test_a_session_written_while_the_agent_sessions_are_listed_is_not_missed(tmp_path: Path) -> None:
    store = CountingStore(str(tmp_path / "listing.db")).open()
    memories = MemoryRepository(store, prefix="lst", embedder=None, warm_in_background=False)
    memories.open()
    # Before the start-up list of heads is taken (tests/test_known_sessions.py): a new session's heads are read.
    assert memories.heads.present.listed.is_set()
    memories.heads.present.listed.clear()
    s1, s2, late = (Namespace(agent_id="bot", session_id=name) for name in ("s1", "s2", "late"))
    try:
        memories.save(DEFAULT_TENANT, [fact(s1, "第一个会话的记录")])
        assert readable(memories, s1) == ["第一个会话的记录"]
        store.during_listing = lambda: memories.save(DEFAULT_TENANT, [fact(late, "列出会话时写入的记录")])
        assert readable(memories, s2) == []  # reading what s2 may hold; the write lands meanwhile
        assert store.during_listing is None
        assert readable(memories, late) == ["列出会话时写入的记录"]  # listed, so read from the store
    finally:
        store.close()


def test_at_places_answers_the_live_messages_of_each_session_and_turn_as_a_filter_selects_them(seeded: Any) -> None:
    # A user's archive answers "the messages around this hit" by (session, turn) without a pass over its rows: the
    # same rows a filter on session, turn, kind and valid_to selects, before and after puts that follow the first call.
    _, _, records = seeded
    index = LocalIndex(0)
    for record in records[:200]:
        index.put_row(record, tokenize=False)
    places = [("s1", 2), ("s2", 5), ("s2", 0), ("s9", 1)]

    def selected() -> list[str]:
        where = Filter('kind == "turn" and valid_to == 0 and ((session_id == "s1" and turn_from == 2) or '
                       '(session_id == "s2" and turn_from in [5, 0]))')
        return [m.id for m in index.select(where)]

    assert [m.id for m in index.at_places(places)] == selected() != []
    for record in records[200:]:  # new rows, and a row closed in place (same id, valid_to set)
        index.put_row(record, tokenize=False)
    first = next(r for r in records if r["kind"] == "turn" and not r["valid_to"] and r["session_id"] == "s1"
                 and r["turn_from"] == 2)
    index.put_row({**first, "valid_to": 99}, tokenize=False)
    assert [m.id for m in index.at_places(places)] == selected() != []
    assert client_id(str(first["id"])) not in selected()
