"""Rows inserted into Lite by columns (acn/storage/database/lite/column_insert.py) read back exactly as rows inserted by rows."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymilvus.client.prepare import Prepare

from acn.common.models import Memory
from acn.providers.embedders import HashEmbedder
from acn.storage.database.base import Filter
from acn.storage.database.memory_rows import OUTPUT_FIELDS, new_memory_id, to_record
from acn.storage.database.milvus import MilvusStore
from acn.storage.repositories.memories import MemoryRepository
from tests.conftest import ENGINE

pytestmark = pytest.mark.skipif(bool(ENGINE), reason="the C++ engine (milvus-lite 2) runs in a process of its own")

# Values a memory row can hold: Chinese, emoji and combining marks, quotes and backslashes, empty strings, the
# largest int64, negative turns, floats that are not exact in float32, nested JSON with unicode and nulls.
ODD = ["订单号 ORD-2024-0042 已发货，退款 ¥239.50", "emoji 🙂👍🏽 e\u0301 \"quoted\" \\back\\slash", "x", "   spaced   "]


def memory(index: int, text: str) -> Memory:
    return Memory(id=new_memory_id(), kind=["fact", "decision", "preference", "turn"][index % 4], content=text,
                  key="k" if index % 2 else None, importance=[5, 7.3, 0.1, 10][index % 4], scope="session",
                  agent_id="agent-列", session_id="s", user_id=None if index % 3 else "u", created_at=2**62 + index,
                  updated_at=2**62 + index, version=index + 1, valid_to=None if index % 5 else 1_700_000_000_000,
                  superseded_by=None if index % 5 else "mem_x", turn_range=[index - 3, index] if index % 2 else None,
                  meta={"source": "测试", "n": index, "nested": {"list": [1, None, "二"], "ok": True}},
                  source_ids=["s1", "s2"] if index % 2 else None,
                  history=[{"version": 1, "content": "旧", "updated_at": 1, "id": "mem_old"}] if index % 3 else None)


@pytest.fixture()
def store(tmp_path: Path) -> Iterator[MilvusStore]:
    opened = MilvusStore(str(tmp_path / "memory.db")).open()
    yield opened
    opened.close()


def collection(store: MilvusStore, dense: bool) -> tuple[MemoryRepository, str]:
    repository = MemoryRepository(store, prefix="c" + uuid.uuid4().hex[:8], embedder=HashEmbedder() if dense else None)
    repository.open()
    return repository, repository.spec.name


def read(store: MilvusStore, name: str, ids: list[str]) -> list[dict[str, Any]]:
    fields = [*OUTPUT_FIELDS, *(["dense"] if "dense" in (store.field_names(name) or ()) else [])]
    rows = store.query(name, Filter("id in {ids}", {"ids": ids}), fields=fields, limit=len(ids))
    return sorted(({k: v for k, v in row.items() if k != "id"} for row in rows), key=lambda row: row["content"])


@pytest.mark.parametrize("dense", [False, True])
def test_rows_inserted_by_columns_read_back_as_rows_inserted_by_rows(store: MilvusStore, dense: bool) -> None:
    _, name = collection(store, dense)
    vector = [0.5] * HashEmbedder().dim if dense else None
    flag = {"embedded": 1} if dense else {}  # the repository's flag of rows that hold their own vector
    by_columns = [{**to_record(memory(i, text), "t1", vector), **flag} for i, text in enumerate(ODD * 3)]
    by_rows = [{**row, "id": new_memory_id()} for row in by_columns]
    store.insert(name, by_columns)
    columns = store._columns[name]
    assert columns is not None and columns.checked  # the column request was built, compared and used
    store._require().insert(name, by_rows)  # pymilvus's row insert, as before
    assert read(store, name, [row["id"] for row in by_columns]) == read(store, name, [row["id"] for row in by_rows])
    assert len(read(store, name, [row["id"] for row in by_columns])) == len(by_columns)


def test_a_column_request_that_differs_is_not_sent(store: MilvusStore, monkeypatch: pytest.MonkeyPatch) -> None:
    # A pymilvus whose column packing built another request than its row packing: the rows go by rows, intact.
    original = Prepare.batch_insert_param

    def drops_a_row(collection: str, entities: list[dict[str, Any]], *args: Any) -> Any:
        return original(collection, [{**entity, "values": entity["values"][:-1]} for entity in entities], *args)

    monkeypatch.setattr(Prepare, "batch_insert_param", drops_a_row)
    _, name = collection(store, dense=False)
    rows = [to_record(memory(i, text), "t1", None) for i, text in enumerate(ODD)]
    store.insert(name, rows)
    assert store._columns[name] is None
    assert len(read(store, name, [row["id"] for row in rows])) == len(rows)
    store.insert(name, [{**row, "id": new_memory_id()} for row in rows])  # later batches too, by rows
    assert store._columns[name] is None


def test_rows_with_other_fields_go_by_rows(store: MilvusStore) -> None:
    _, name = collection(store, dense=False)
    rows = [to_record(memory(i, text), "t1", None) for i, text in enumerate(ODD)]
    store.insert(name, rows)
    columns = store._columns[name]
    assert columns is not None and columns.fits(rows)
    assert not columns.fits([{**rows[0], "extra": 1}]) and not columns.fits([{k: v for k, v in rows[0].items()
                                                                              if k != "doc"}])
    assert not columns.fits([])
