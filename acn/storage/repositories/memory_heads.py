"""Memory heads: what a request needs to know about its own session's memories, reached by primary key.

Milvus Lite 3.2.2 answers any scalar filter by scanning every row of the collection (STORAGE.md, "Learned since"),
so a brand-new session that asks "what is the newest stamp in this session?" or "which rows can I read?" pays for
every other session's rows (issue 33: 4-8 s at 550k rows). A head is one small row per session (the high-water
mark of its stamps), per agent (it has agent- or user-scope rows) and per tenant (it has shared rows), in a
collection of its own, under an id derived from what it names: one `id in [...]` lookup (1 ms) tells whether the
rows a session can read are known to be none, and its clock's high-water mark. On a Lite file (one writer) each head
also lists its rows' ids in member pages (PAGE_IDS ids a row, ids `<head id>:<n>`): a session that has rows, after a
restart, loads them by primary key (500 ids a lookup) instead of a filtered scan of the whole collection.

Why it stays correct:
- A head is written before the memory rows it stands for (MemoryRepository.save): a reader that finds no head
  finds no row, except one written concurrently, which it may miss anyway.
- Heads only ever say "there may be rows": a delete leaves them (the next read then scans, as before).
- Presence never goes back, so it is remembered in process on every store. Absence is remembered only where this
  process is the only writer (a Lite file); against a server another replica may write the session, so absence
  is read again (one primary-key lookup) every time it is asked.
- A session's high-water mark is written as the max of what this process knew and the batch's stamps. Two
  replicas writing one session at once could each write their own max (the later upsert wins): what is lost is
  at most the other batch's run ahead of the wall clock (a batch stamps items faster than one per ms), and
  record_turn writes a session only under its Redis lease (acn/storage/repositories/coordination.py).
- Rows written before heads existed: a background pass reads the collection once, writes their heads and then a
  `built` marker row; until the marker exists no head is trusted (`ready` is False, /readyz says so) and every
  read takes the old path.
- Member pages are complete only if every writer kept them: the marker says so (high_ms 1). A process that writes
  without keeping them (against a server, or member_pages=False) sets it to 0; a Lite process that then opens the
  store lists every row again in the background pass before it loads any session by id (`pages_ready`, /readyz).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from acn.common.models import Memory, Namespace
from acn.storage.database import QUERY_WINDOW, Filter, MemoryStore, Record, every_row, stored_id
from acn.storage.repositories.head_rows import (
    HEAD_FIELDS,
    HeadKey,
    archive_owner,
    group_keys,
    head_id,
    heads_of,
    heads_spec,
    owner_of,
    page_id,
    session_key,
)
from acn.storage.repositories.listed_ids import ListedIds

PAGE = "page"  # the kind of a member page: up to PAGE_IDS ids of one owner's rows, its number in high_ms
PAGE_IDS = 256  # ids a member page holds (a save rewrites the owner's last page: kept small)
PAGES_A_READ = 32  # member pages asked for in one primary-key lookup
KNOWN_MEMBERS = 1024  # owners whose member lists are held in process (Lite only), least recently used out
# The id of the marker row: every memory row has its heads. "built-u": each user's rows are listed in member pages of
# their own (a store marked "built" listed them under their agent's: its heads are written again once, at start).
BUILT = "built-u"
KNOWN_HEADS = 65_536  # heads remembered in process (present, or on a Lite file absent); least recently used out
WRITE_CHUNK = 500
log = logging.getLogger("acn.store")
# Reads every memory row (these fields) of the collection, in pieces: the background pass that writes old rows' heads.
Scan = Callable[[list[str]], Iterable[Record]]


class MemoryHeads:
    """Per-session, per-agent and per-tenant heads of a memories collection, read and written by primary key."""

    def __init__(self, store: MemoryStore, *, prefix: str, exclusive: bool, pages: bool = True) -> None:
        self.store = store
        self.spec = heads_spec(prefix)
        self.exclusive = exclusive  # a Lite file: this process is the only writer, so absence can be remembered
        self.paged = exclusive and pages  # member pages kept (only one writer can keep them complete)
        self.ready = threading.Event()  # every memory row has its heads (the built marker is stored)
        # Every row is listed in its owner's member pages: only where one writer kept them all along (a Lite
        # file), told by the built marker's high_ms (1); a server process that writes marks them stale (0).
        self.pages_ready = threading.Event()
        self.building: threading.Thread | None = None
        self._lock = threading.Lock()
        self._known: OrderedDict[HeadKey, int | None] = OrderedDict()  # high-water mark; None: no such head
        # On a Lite file (one writer), each head's rows are also listed by id in member pages, so that a session
        # that has rows loads them by primary key too (member_ids); held here once read, per owner.
        self._members: OrderedDict[HeadKey, list[list[str]]] = OrderedDict()
        self._listed: dict[HeadKey, set[str]] = {}
        # The repository's write lock: the background pass lists rows under it, so that its page writes and a
        # save's never interleave.
        self.write_order: threading.RLock = threading.RLock()
        # On a Lite file: the id of every head that may exist (acn/storage/repositories/listed_ids.py): a new session's
        # first call learns "no head" without a read.
        self.present = ListedIds(enabled=exclusive, what="memory heads")
        self.listing: threading.Thread | None = None

    # -- start-up ------------------------------------------------------------------------------

    def open(self, *, memories_existed: bool, scan: Scan, background: bool = True) -> None:
        """Create the collection; when rows may lack heads (written before heads existed), write theirs in the
        background (or now, with background=False) and mark the collection built."""
        self.store.ensure(self.spec)
        if self.exclusive:  # after the build below, if any: the heads it writes are added as they are written
            self.listing = threading.Thread(target=self.list_present, name="acn-heads-list", daemon=True)
        if not memories_existed:  # a new memories collection: no row can lack a head
            self._mark_built()
            self._start_listing(background)
            return
        marker = self.store.query(self.spec.name, Filter("id in {head_ids}", {"head_ids": [BUILT]}),
                                  fields=["id", "high_ms"], limit=1)
        if marker:
            self.ready.set()  # heads are complete; member pages only if one writer kept them all along
            paged = int(marker[0]["high_ms"]) == 1
            if not self.paged:
                if paged:
                    self._mark_built()  # this process writes without keeping member pages: they go stale
                return
            if paged:
                self.pages_ready.set()
                self._start_listing(background)
                return
        if not background:
            self.build(scan)
            self._start_listing(background)
            return
        self.building = threading.Thread(target=self.build, args=(scan,), name="acn-heads-build", daemon=True)
        self.building.start()
        self._start_listing(background)

    def _start_listing(self, background: bool) -> None:
        if self.listing is None:
            return
        if background:
            self.listing.start()
        else:
            self.list_present()

    def list_present(self) -> None:
        """List the id of every head (Lite): one read of the heads collection, off the request path, after the
        build of old rows' heads if one runs (a failed build leaves heads untrusted altogether)."""
        if self.building is not None:
            self.building.join()
        if self.ready.is_set():
            self.present.load(lambda: every_row(self.store, self.spec.name, Filter('kind != "page"'), ["id"]))

    def build(self, scan: Scan) -> None:
        """Write the heads of every stored memory row (one read of the collection), then the built marker."""
        try:
            needed: dict[HeadKey, int] = {}
            members: dict[HeadKey, list[str]] = {}
            for row in scan(["agent_id", "session_id", "scope", "updated_at", "tenant", "user_id", "kind"]):
                for key, stamp in heads_of(str(row["tenant"]), [row]).items():
                    needed[key] = max(needed.get(key, 0), stamp)
                if self.paged:
                    owner = owner_of(str(row["tenant"]), str(row["agent_id"]), str(row["session_id"]),
                                     str(row["scope"]), str(row.get("user_id") or ""))
                    # The key the row has once ids are scoped (a store from before is moved at start, maybe while
                    # this runs: memories.scope_legacy_ids), so pages never list a key that is about to go.
                    members.setdefault(owner, []).append(stored_id(str(row["tenant"]), str(row["id"])))
                    archive = archive_owner(str(row["tenant"]), str(row["agent_id"]), str(row.get("user_id") or ""),
                                            str(row.get("kind") or ""))
                    if archive is not None:  # a user's archived message: listed in their archive's pages too
                        members.setdefault(archive, []).append(stored_id(str(row["tenant"]), str(row["id"])))
            for owner, ids in members.items():
                with self.write_order:  # with what saves meanwhile listed (member pages are read first)
                    self.store.upsert(self.spec.name, self._list(owner, ids))
            keys = list(needed)
            for start in range(0, len(keys), WRITE_CHUNK):
                chunk = keys[start: start + WRITE_CHUNK]
                stored = self._read(chunk)  # a save meanwhile wrote its own head: keep the higher mark
                self._write({key: max(needed[key], stored.get(key) or 0) for key in chunk})
            self._mark_built()
            log.info("memory heads written for %d sessions, agents and tenants", len(keys))
        except Exception:  # the old path answers meanwhile; the next start tries again
            log.exception("writing memory heads failed")

    def _mark_built(self) -> None:
        self.store.upsert(self.spec.name, [self._row(("built", "", "", ""), int(self.paged)) | {"id": BUILT}])
        self.ready.set()
        if self.paged:
            self.pages_ready.set()

    def pending(self) -> list[str]:
        """Return what start-up work still runs in the background (for /readyz)."""
        if not self.ready.is_set():
            return ["memory_heads"]
        if self.paged and not self.pages_ready.is_set():
            return ["member_pages"]
        return ["heads_listed"] if self.listing is not None and self.listing.is_alive() else []

    # -- reads ---------------------------------------------------------------------------------

    def session_high(self, tenant: str, namespace: Namespace) -> int | None:
        """Return the newest stamp ever written in the session (0: none); None while heads are being built."""
        if not self.ready.is_set():
            return None
        key = session_key(tenant, namespace)
        return self._lookup([key]).get(key) or 0

    def session_empty(self, tenant: str, namespace: Namespace) -> bool:
        """Return True when the session certainly holds no row of its own."""
        return self.ready.is_set() and self._lookup([session_key(tenant, namespace)]).get(
            session_key(tenant, namespace)) is None

    def readable_empty(self, tenant: str, namespace: Namespace) -> bool:
        """Return True when no row a session can read exists (its own, its agent's, its tenant's shared)."""
        if not self.ready.is_set():
            return False
        found = self._lookup(group_keys(tenant, namespace))
        return all(value is None for value in found.values())

    def _lookup(self, keys: Sequence[HeadKey]) -> dict[HeadKey, int | None]:
        found: dict[HeadKey, int | None] = {}
        missing: list[HeadKey] = []
        with self._lock:
            for key in keys:
                if key in self._known and (self._known[key] is not None or self.exclusive):
                    found[key] = self._known[key]
                    self._known.move_to_end(key)
                else:
                    missing.append(key)
            # Every head that may exist is listed: one not among them is none (remembered as a read's None is).
            for key in [key for key in missing if self.present.absent(head_id(*key))]:
                found[key] = None
                self._remember(key, None)
                missing.remove(key)
        if missing:
            stored = self._read(missing)
            found.update(stored)
            with self._lock:
                for key, value in stored.items():
                    known = self._known.get(key)
                    # A save since the read: its mark wins (a head is only ever written higher).
                    self._remember(key, value if known is None or (value or 0) > known else known)
        return found

    def _read(self, keys: Sequence[HeadKey]) -> dict[HeadKey, int | None]:
        """Read heads by primary key: the filter is `id in [...]` alone (what Lite answers from its key index)."""
        ids = {head_id(*key): key for key in keys}
        rows = self.store.query(self.spec.name, Filter("id in {head_ids}", {"head_ids": sorted(ids)}),
                                fields=list(HEAD_FIELDS), limit=len(ids))
        found: dict[HeadKey, int | None] = dict.fromkeys(keys)
        for row in rows:
            key = ids.get(str(row["id"]))
            if key is not None and (row["kind"], row["tenant"], row["agent_id"], row["session_id"]) == key:
                found[key] = int(row["high_ms"])
        return found

    def recent_sessions(self, limit: int) -> list[tuple[str, Namespace, int]]:
        """Return up to `limit` sessions that hold rows, most recently written first: (tenant, namespace, high-water
        mark). One read of the heads collection (a row per session, agent and tenant, and their member pages; not
        the memories): for the start-up warmer (acn/app/warmer.py), off the request path. The marks read are
        remembered, as a lookup's would be."""
        if not self.ready.is_set():
            return []
        rows = self.store.query(self.spec.name, Filter('kind == "session"'),
                                fields=["tenant", "agent_id", "session_id", "high_ms"], limit=QUERY_WINDOW)
        rows.sort(key=lambda row: int(row["high_ms"]), reverse=True)
        found = [(str(row["tenant"]), Namespace(agent_id=str(row["agent_id"]), session_id=str(row["session_id"])),
                  int(row["high_ms"])) for row in rows[:limit]]
        with self._lock:
            for tenant, namespace, high in reversed(found):
                key = session_key(tenant, namespace)
                self._remember(key, max(high, self._known.get(key) or 0))
        return found

    def recent_users(self, limit: int) -> list[tuple[str, str, str]]:
        """Return up to `limit` users that hold user-scope rows, most recently written first: (tenant, agent, user).
        One read of the heads collection, for the start-up warmer (off the request path)."""
        if not self.ready.is_set():
            return []
        rows = self.store.query(self.spec.name, Filter('kind == "user"'),
                                fields=["tenant", "agent_id", "session_id", "high_ms"], limit=QUERY_WINDOW)
        rows.sort(key=lambda row: int(row["high_ms"]), reverse=True)
        return [(str(row["tenant"]), str(row["agent_id"]), str(row["session_id"])) for row in rows[:limit]]

    def member_ids(self, tenant: str, namespace: Namespace) -> list[str] | None:
        """Return the ids of every row a session can read, by primary-key reads of member pages (None: not kept:
        against a server, or while heads are being built)."""
        if not self.paged or not self.pages_ready.is_set():
            return None
        keys = group_keys(tenant, namespace)
        found = self._lookup(keys)
        ids: list[str] = []
        for key in keys:
            if found.get(key) is not None:
                ids += [member for page in self._pages(key) for member in page]
        return ids

    def user_empty(self, tenant: str, agent_id: str, user_id: str, kind: str = "user") -> bool:
        """Return True when the user certainly holds no user-scope row with the agent (kind "turns": no archived
        message of any of their conversations)."""
        key: HeadKey = (kind, tenant, agent_id, user_id)
        return self.ready.is_set() and self._lookup([key]).get(key) is None

    def user_member_ids(self, tenant: str, agent_id: str, user_id: str, kind: str = "user") -> list[str] | None:
        """Return the ids of the user's user-scope rows with the agent (kind "turns": their archived messages),
        from the member pages (None: not kept)."""
        if not self.paged or not self.pages_ready.is_set():
            return None
        key: HeadKey = (kind, tenant, agent_id, user_id)
        if self._lookup([key]).get(key) is None:
            return []
        return [member for page in self._pages(key) for member in page]

    def _pages(self, owner: HeadKey) -> list[list[str]]:
        with self._lock:
            pages = self._members.get(owner)
            if pages is not None:
                self._members.move_to_end(owner)
                return pages
            absent = self.exclusive and owner in self._known and self._known[owner] is None
        pages = []
        while not absent:  # an owner known to have no head has no pages: nothing to read
            wanted = [page_id(owner, n) for n in range(len(pages), len(pages) + PAGES_A_READ)]
            rows = self.store.query(self.spec.name, Filter("id in {page_ids}", {"page_ids": wanted}),
                                    fields=["id", "ids", "kind", "tenant", "agent_id", "session_id"],
                                    limit=len(wanted))
            by_id = {str(row["id"]): row for row in rows
                     if (row["kind"], row["tenant"], row["agent_id"], row["session_id"]) == (PAGE, *owner[1:])}
            for page in wanted:
                if page not in by_id:
                    break
                pages.append([str(member) for member in by_id[page]["ids"] or []])
            if len(pages) % PAGES_A_READ or not by_id or len(by_id) < len(wanted):
                break
        with self._lock:
            if owner not in self._members:  # a save since the read listed it first: its lists win
                self._members[owner] = pages
                self._listed[owner] = {member for page in pages for member in page}
                while len(self._members) > KNOWN_MEMBERS:
                    forgotten, _ = self._members.popitem(last=False)
                    self._listed.pop(forgotten, None)
            return self._members[owner]

    def _list(self, owner: HeadKey, ids: Sequence[str]) -> list[Record]:
        """Add ids to an owner's member pages (those not listed yet); return the page rows to write (its last
        page rewritten, and new ones)."""
        pages = self._pages(owner)
        with self._lock:
            listed = self._listed.setdefault(owner, set())
            new = [member for member in dict.fromkeys(ids) if member not in listed]
            if not new:
                return []
            first = max(len(pages) - 1, 0)
            if not pages:
                pages.append([])
            for member in new:
                if len(pages[-1]) >= PAGE_IDS:
                    pages.append([])
                pages[-1].append(member)
                listed.add(member)
            rows = [{"id": page_id(owner, n), "kind": PAGE, "tenant": owner[1], "agent_id": owner[2],
                     "session_id": owner[3], "high_ms": n, "ids": list(pages[n]), "dense": [1.0, 0.0]}
                    for n in range(first, len(pages))]
        return rows

    # -- writes --------------------------------------------------------------------------------

    def note_save(self, tenant: str, memories: Sequence[Memory]) -> None:
        """Write the heads a batch needs, before its rows (see the module's notes)."""
        needed = heads_of(tenant, memories)
        pages: list[Record] = []
        if self.paged:  # one writer: the member pages stay complete (against a server they are not kept)
            owners: dict[HeadKey, list[str]] = {}
            for memory in memories:
                # The rows' primary keys (tenant-scoped, memory_rows.stored_id): pages are read by `id in [...]`.
                owners.setdefault(owner_of(tenant, memory.agent_id, memory.session_id, str(memory.scope),
                                           memory.user_id or ""), []).append(stored_id(tenant, memory.id))
                archive = archive_owner(tenant, memory.agent_id, memory.user_id or "", str(memory.kind))
                if archive is not None:
                    owners.setdefault(archive, []).append(stored_id(tenant, memory.id))
            for owner, ids in owners.items():
                pages += self._list(owner, ids)
        with self._lock:
            known = {key: self._known.get(key) for key in needed}
        # A session's mark moves with every save (the clock reads it after a restart); an agent's or a tenant's
        # head only says "there are rows" and is written once.
        # A user's mark moves too: the start-up warmer loads the most recently written users' indexes first.
        wanted = {key: max(stamp, known[key] or 0) for key, stamp in needed.items()
                  if known[key] is None or (key[0] in ("session", "user") and stamp > (known[key] or 0))}
        if wanted or pages:
            self._write(wanted, pages)  # one upsert: heads and pages

    def _write(self, heads: dict[HeadKey, int], pages: Sequence[Record] = ()) -> None:
        self.present.add(head_id(*key) for key in heads)
        self.store.upsert(self.spec.name, [*pages, *(self._row(key, high) for key, high in heads.items())])
        with self._lock:
            for key, high in heads.items():
                self._remember(key, max(high, self._known.get(key) or 0))

    def _remember(self, key: HeadKey, value: int | None) -> None:
        self._known[key] = value
        self._known.move_to_end(key)
        while len(self._known) > KNOWN_HEADS:
            self._known.popitem(last=False)

    @staticmethod
    def _row(key: HeadKey, high: int) -> dict[str, Any]:
        kind, tenant, agent, session = key
        # The collection's only vector is a placeholder (Milvus requires one); it is never searched.
        return {"id": head_id(*key), "kind": kind, "tenant": tenant, "agent_id": agent, "session_id": session,
                "high_ms": high, "ids": [], "dense": [1.0, 0.0]}
