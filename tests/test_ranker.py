"""The learned ranker of focused recall (acn/retrieval/learned_ranker.py): its numpy evaluator equals LightGBM, a model
file it cannot trust leaves the hand-tuned order, the shipped model reorders a real recall, and the training
command is deterministic."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from acn.assembly.recall import focused_memories, message_day
from acn.common.models import Memory, Namespace
from acn.retrieval import learned_ranker as ranker
from acn.retrieval.hybrid_rank import Ranked
from acn.retrieval.learned_ranker import FEATURES, MODEL_FILE, features, forest, load_model, parse_model, reordered
from acn.server import create_app
from tests.conftest import make_settings, post

FIXTURE = Path(__file__).with_name("ranker_lightgbm.json")


def candidate(key: str, score: float, content: str, **parts: float) -> Ranked:
    memory = Memory(id=key, kind="turn", content=content, importance=5, scope="session", agent_id="a",
                    session_id="s", created_at=0, updated_at=0, version=1, turn_range=[0, 0])
    return Ranked(memory, score, {"relevance": score, "bm25": score, **parts})


CANDIDATES = [candidate("a", 0.9, "我的相机放在书房了", dense=0.5), candidate("b", 0.8, "今天好热", dense=0.2),
              candidate("c", 0.5, "相机是去年买的", dense=0.6), candidate("d", 0.4, "楼下开了家咖啡店", neighbour=1.0)]


def model_file(tmp_path: Path, trees: Any, **changes: Any) -> Path:
    data = {"format": ranker.MODEL_FORMAT, "feature_version": ranker.FEATURE_VERSION, "features": list(FEATURES),
            "modes": {"hybrid": {"trees": trees}}, **changes}
    path = tmp_path / "model.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


# A tree that prefers the candidates the hand-tuned order puts last: higher score_rank, higher leaf.
REVERSING = [{"feature": [FEATURES.index("score_rank"), -1, -1], "threshold": [0.5, 0.0, 0.0], "left": [1, -1, -1],
              "right": [2, -1, -1], "value": [0.0, -1.0, 1.0]}]


def test_the_numpy_evaluator_equals_lightgbm_on_a_fixed_feature_matrix() -> None:
    # tests/ranker_lightgbm.json: trees LightGBM trained (bench.train_ranker --write-fixture), rows it did not
    # see, and LightGBM's own predictions for them.
    data = json.loads(FIXTURE.read_text(encoding="utf-8"))
    predicted = forest(data["trees"]).predict(np.array(data["rows"]))
    assert np.allclose(predicted, data["expected"], rtol=0, atol=1e-6)
    assert len(set(np.round(predicted, 6).tolist())) > 5  # the fixture exercises many paths, not one leaf


def test_the_shipped_model_loads_and_scores_400_candidates() -> None:
    model = load_model(MODEL_FILE)
    assert model is not None and "hybrid" in model
    rows = np.random.default_rng(0).random((400, len(FEATURES)))
    scores = model["hybrid"].predict(rows)
    assert scores.shape == (400,) and np.all(np.isfinite(scores))


def test_a_valid_model_file_reorders_the_candidates(tmp_path: Path) -> None:
    path = model_file(tmp_path, REVERSING)
    order = [c.memory.id for c in reordered("相机在哪？", CANDIDATES, [None] * 4, enabled=True, path=path)]
    assert order == ["b", "c", "d", "a"]  # rank 0 goes left (-1); the others tie at +1 and keep their order
    off = reordered("相机在哪？", CANDIDATES, [None] * 4, enabled=False, path=path)
    assert [c.memory.id for c in off] == ["a", "b", "c", "d"]


def test_candidates_without_a_model_for_them_are_not_featurised(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # The package ships no BM25-only ("lexical") model: a BM25-only focused assemble computed every candidate's
    # features at each call for nothing (~1 ms of ~13 at the plateau of a long chat, issue 47).
    made: list[int] = []
    monkeypatch.setattr(ranker, "features", lambda *args: made.append(1) or features(*args))
    path = model_file(tmp_path, REVERSING)  # hybrid trees only
    lexical = [candidate(c.memory.id, c.score, c.memory.content) for c in CANDIDATES]  # no dense part
    assert reordered("相机在哪？", lexical, [None] * 4, enabled=True, path=path) == lexical
    assert made == []
    order = [c.memory.id for c in reordered("相机在哪？", CANDIDATES, [None] * 4, enabled=True, path=path)]
    assert order == ["b", "c", "d", "a"] and made == [1]  # hybrid ones are, and reordered as before


def bad_files() -> dict[str, Any]:
    tree = REVERSING[0]
    return {
        "not json": "{not json",
        "not an object": "[1, 2]",
        "another format": {"format": "pickle"},
        "other features": {"features": list(reversed(FEATURES))},
        "other version": {"feature_version": ranker.FEATURE_VERSION + 1},
        "no trees": {"modes": {"hybrid": {"trees": []}}},
        "unknown mode": {"modes": {"turbo": {"trees": REVERSING}}},
        "NaN leaf": [{**tree, "value": [0.0, math.nan, 1.0]}],
        "infinite threshold": [{**tree, "threshold": [math.inf, 0.0, 0.0]}],
        "child before parent (a cycle)": [{**tree, "left": [0, -1, -1]}],
        "child out of range": [{**tree, "right": [9, -1, -1]}],
        "feature out of range": [{**tree, "feature": [len(FEATURES), -1, -1]}],
        "fractional feature": [{**tree, "feature": [1.5, -1, -1]}],
        "string value": [{**tree, "value": [0.0, "1", 1.0]}],
        "arrays of different lengths": [{**tree, "value": [0.0, 1.0]}],
        "huge integer": [{**tree, "left": [10**30, -1, -1]}],
    }


@pytest.mark.parametrize("name", list(bad_files()))
def test_a_model_file_that_cannot_be_trusted_leaves_the_hand_tuned_order(tmp_path: Path, name: str) -> None:
    bad = bad_files()[name]
    if isinstance(bad, str):
        path = tmp_path / "model.json"
        path.write_text(bad, encoding="utf-8")
    elif isinstance(bad, list):
        path = model_file(tmp_path, bad)
    else:
        path = model_file(tmp_path, REVERSING, **bad)
    assert load_model(path) is None
    order = reordered("相机在哪？", CANDIDATES, [None] * 4, enabled=True, path=path)
    assert [c.memory.id for c in order] == ["a", "b", "c", "d"]


def test_a_missing_or_oversized_model_file_leaves_the_hand_tuned_order(tmp_path: Path) -> None:
    valid = model_file(tmp_path, REVERSING).read_text(encoding="utf-8")
    huge = tmp_path / "huge.json"
    huge.write_text(valid[:-1] + " " * ranker.MAX_MODEL_BYTES + "}", encoding="utf-8")  # valid JSON, too large
    for path in (tmp_path / "missing.json", huge):
        assert load_model(path) is None
        order = reordered("相机在哪？", CANDIDATES, [None] * 4, enabled=True, path=path)
        assert [c.memory.id for c in order] == ["a", "b", "c", "d"]


def test_scores_that_overflow_leave_the_hand_tuned_order(tmp_path: Path) -> None:
    # Each leaf is finite, their sum is not: the scores are checked, not only the file.
    path = model_file(tmp_path, [{**REVERSING[0], "value": [0.0, -1e308, 1e308]}] * 2)
    assert load_model(path) is not None
    order = reordered("相机在哪？", CANDIDATES, [None] * 4, enabled=True, path=path)
    assert [c.memory.id for c in order] == ["a", "b", "c", "d"]


def test_features_are_finite_whatever_the_parts_hold() -> None:
    odd = [candidate("x", 0.5, "相机", dense=math.nan), candidate("y", 0.0, "", bm25=math.inf)]
    rows = features("相机在哪？", odd, ["2024-03-01", None])
    assert rows.shape == (2, len(FEATURES)) and np.all(np.isfinite(rows))
    assert rows[0, FEATURES.index("day_share")] == 1.0 and rows[1, FEATURES.index("day_share")] == 0.0


def test_parse_model_refuses_a_file_over_the_bound() -> None:
    with pytest.raises(ranker.ModelError):
        parse_model(b" " * (ranker.MAX_MODEL_BYTES + 1))


NS = {"agent_id": "ranker", "session_id": "ranker-1"}
LINES = ["我的相机放在书房的柜子里", "今天天气好热", "相机是去年双十一买的索尼", "楼下新开了一家咖啡店", "周末去拍了湖边的照片",
         "镜头盖好像丢了", "表姐下个月结婚", "中午吃了碗牛肉面", "相机的电池该换了", "我把三脚架借给了同事"]


def recall_order(tmp_path: Path, setting: str, *, feed: bool = False,
                 observed: list[tuple[list[Ranked], np.ndarray]] | None = None) -> list[str]:
    """Return the contents focused recall orders for the question, on a store under tmp_path (fed when `feed`)."""
    app = create_app(make_settings(tmp_path, embedder="use", ranker=setting))
    try:
        client = app.test_client()
        for index, text in enumerate(LINES if feed else []):
            meta = {"date": f"2024-03-{1 + index // 4:02d}"}
            assert post(client, "record_turn", {**NS, "messages": [{"role": "user", "content": text,
                                                                    "meta": meta}]}).status_code == 200
        assert post(client, "assemble", {**NS, "mode": "focused", "max_tokens": 1000, "messages": [],
                                         "user_input": QUESTION}).status_code == 200
        deps = app.extensions["acn"].deps("default")
        if observed is not None:
            ranker.OBSERVER = lambda query, candidates, days, rows: observed.append((candidates, rows))
        try:
            found = focused_memories(Namespace(**NS), QUESTION, deps, top_k=5, turn_pool=40, history=[])
        finally:
            ranker.OBSERVER = None
        return [m.content for m in found]
    finally:
        app.extensions["acn"].close()


QUESTION = "我的相机放哪了？"


def test_the_shipped_model_reorders_a_real_recall(tmp_path: Path) -> None:
    hand = recall_order(tmp_path, "off", feed=True)
    learned = recall_order(tmp_path, "learned")
    assert sorted(hand) == sorted(learned) and len(hand) >= 3  # the same candidates...
    model = load_model(MODEL_FILE)
    assert model is not None
    # ... in the order the shipped trees give the hand-tuned list (ties keep the hand-tuned order)
    observed: list[tuple[list[Ranked], np.ndarray]] = []
    assert recall_order(tmp_path, "off", observed=observed) == hand
    (candidates, rows), = observed
    assert rows[0, FEATURES.index("hybrid")] == 1.0 and message_day(candidates[0].memory) is not None
    scores = model["hybrid"].predict(rows)
    expected = [candidates[i].memory.content for i in np.lexsort((np.arange(len(candidates)), -scores))]
    assert [c.memory.content for c in candidates] == hand
    assert learned == expected
    assert learned != hand


def test_training_is_deterministic_and_check_says_when_the_file_differs(tmp_path: Path) -> None:
    # lightgbm is in the test extra (and the bench extra): the server never imports it.
    from bench import train_ranker

    collected = train_ranker.synthetic_collected()
    groups = train_ranker.featured(collected)
    assert groups.labels.sum() > 0 and len(groups.sizes) > 10
    first = train_ranker.model_text(train_ranker.train(groups), groups, ["synthetic"], [1000])
    assert first == train_ranker.model_text(train_ranker.train(groups), groups, ["synthetic"], [1000])
    assert parse_model(first)["hybrid"].roots.size == train_ranker.ROUNDS
    data, out = tmp_path / "data.json.gz", tmp_path / "model.json"
    train_ranker.save_collected(collected, data)
    assert np.array_equal(train_ranker.featured(train_ranker.load_collected(data)).rows, groups.rows)
    arguments = ["--data-cache", str(data), "--out", str(out), "--suites", "synthetic", "--budgets", "1000"]
    assert train_ranker.main([*arguments, "--check"]) == 1 and not out.exists()  # nothing there yet: differs
    assert train_ranker.main(arguments) == 0 and out.read_text(encoding="utf-8") == first
    assert train_ranker.main([*arguments, "--check"]) == 0  # rebuilt from the same data: the same file
    out.write_text(first.replace('"seed":7', '"seed":8'), encoding="utf-8")
    assert train_ranker.main([*arguments, "--check"]) == 1
    assert '"seed":8' in out.read_text(encoding="utf-8")  # --check never writes
