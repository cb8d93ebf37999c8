"""Rows inserted into a Milvus Lite collection packed column by column: the request pymilvus builds from rows, faster.

MilvusClient.insert takes rows (dicts) and packs them value by value, checking each value's type: ~45 µs for a
memory row of 18 fields on pymilvus 3.0.2, about a tenth of a memory_write call at 100k memories in one namespace.
The same InsertRequest is built from columns (Prepare.batch_insert_param) in ~7 µs a row (medians of 30 batches of
100 memory rows: 4.5 vs 0.6 ms). MilvusClient has no column insert (the ORM's Collection.insert, which had one, is
deprecated), so the connection handler's batch_insert is used, and only once, for a collection's first rows, both
ways build byte-equal requests; otherwise, or for rows whose fields differ from the collection's, rows go through
MilvusClient.insert as before. Lite only: it runs in this process with the default database, which is all the
handler's call is given (a server's client may name a database, and its requests carry a schema timestamp).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pymilvus import MilvusClient
from pymilvus.client import ts_utils
from pymilvus.client.call_context import _api_level_md
from pymilvus.client.prepare import Prepare
from pymilvus.client.utils import check_status

from acn.storage.base import Record

log = logging.getLogger("acn.store")


@dataclass(frozen=True)
class ColumnInsert:
    """How rows of one collection are inserted by columns: its input fields (name, type) and its description;
    checked once a batch of its rows built the row insert's very request."""

    collection: str
    fields: tuple[tuple[str, Any], ...]
    schema: dict[str, Any]
    checked: bool = False

    @classmethod
    def of(cls, client: MilvusClient, collection: str) -> ColumnInsert | None:
        """Return the (unchecked) column insert of a collection; None if this pymilvus lacks what it uses."""
        try:
            schema = client.describe_collection(collection)
            fields = tuple((str(field["name"]), field["type"]) for field in schema["fields"]
                           if not field.get("is_function_output"))
            handler = client._get_connection()  # noqa: SLF001  (no public column insert: see the module's note)
            if callable(getattr(handler, "batch_insert", None)) and callable(getattr(Prepare, "batch_insert_param",
                                                                                      None)):
                return cls(collection, fields, schema)
        except Exception:  # another pymilvus: the row insert is what it documents
            log.warning("collection %s: rows are inserted one by one", collection, exc_info=True)
        return None

    def same_request(self, client: MilvusClient, rows: Sequence[Record]) -> bool:
        """Return True when the rows (which fit) build byte-equal requests by columns and by rows."""
        try:
            handler = client._get_connection()  # noqa: SLF001
            by_rows = handler._prepare_row_insert_request(self.collection, list(rows))  # noqa: SLF001
            by_columns = Prepare.batch_insert_param(self.collection, self.entities(rows), "", self.schema["fields"])
            same = bool(by_rows.SerializeToString(deterministic=True)
                        == by_columns.SerializeToString(deterministic=True))
        except Exception:
            log.warning("collection %s: rows are inserted one by one", self.collection, exc_info=True)
            return False
        if not same:
            log.warning("collection %s: rows are inserted one by one (the column request differs)", self.collection)
        return same

    def fits(self, rows: Sequence[Record]) -> bool:
        """Return True when every row has exactly the collection's input fields."""
        names = {name for name, _ in self.fields}
        return bool(rows) and all(len(row) == len(names) and names.issuperset(row) for row in rows)

    def entities(self, rows: Sequence[Record]) -> list[dict[str, Any]]:
        """Return the rows as pymilvus's column entities."""
        return [{"name": name, "type": kind, "values": [row[name] for row in rows]} for name, kind in self.fields]

    def insert(self, client: MilvusClient, rows: Sequence[Record]) -> None:
        """Insert rows that fit (see `fits`).

        The request is sent as the row insert sends its own (a blocking call), not as the handler's batch_insert
        does: that one makes a gRPC future, and each future starts a thread and waits until it runs. With 32
        requests at once that wait queued behind the interpreter lock (~5 ms a switch), twice a record_turn.
        """
        handler = client._get_connection()  # noqa: SLF001
        request = Prepare.batch_insert_param(self.collection, self.entities(rows), "", self.schema["fields"])
        response = handler._stub.Insert(request=request, metadata=_api_level_md(None))  # noqa: SLF001
        check_status(response.status)
        ts_utils.update_collection_ts(self.collection, response.timestamp, handler.server_address, "")
