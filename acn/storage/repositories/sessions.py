"""Session working state (buffer + segments) as versioned snapshots in the same Milvus store."""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from acn.common.conversation import SessionState, VersionInfo
from acn.common.errors import ConflictError, LeaseLostError, NotFoundError
from acn.common.models import Namespace
from acn.storage.database import Filter, MemoryStore, Record, SnapshotCipher, every_row
from acn.storage.repositories.catch_up import caught_up, read_visible
from acn.storage.repositories.coordination import Lease, RedisCoordinator
from acn.storage.repositories.listed_ids import ListedIds
from acn.storage.repositories.session_rows import chunk_text, pack, session_spec, unpack
from acn.text.pii import redact_value

log = logging.getLogger("acn.store")
HEAD = "head"
HEAD_CACHE_SIZE = 2048
# Sessions known to have no archiving mark (Lite): forgotten all at once past this many (a forgotten one costs one
# primary-key read), so a process that reads many sessions does not grow the set without end.
CLEAR_SESSIONS = 65_536
SNAPSHOT = "snapshot"
# Old versions are deleted every PRUNE_EVERY commits; a prune looks PRUNE_REACH versions behind the kept window
# (its own batch, and one batch a process killed between its commit and its prune left).
PRUNE_EVERY = 10
PRUNE_REACH = 2 * PRUNE_EVERY
# A turn's archive is written before its commit: the session's "archiving" row says so until the commit replaces
# it with a "committed" one (in the same upsert as the head row). A request killed in between leaves the row, and
# the next writer of the session deletes the archive rows of turns after the head before writing its own.
ARCHIVING = "archiving"
COMMITTED = "committed"


class _SessionLock:
    """A session's lock and how many threads hold or wait for it (guarded by the repository's _locks_guard)."""

    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.users = 0


class SessionRepository:
    """Read, commit, list and roll back session versions; one writer per session at a time."""

    def __init__(self, store: MemoryStore, *, prefix: str, keep_versions: int = 100,
                 cipher: SnapshotCipher | None = None, redact: bool = False,
                 coordinator: RedisCoordinator | None = None) -> None:
        self.store = store
        # Several server processes on one Milvus: a Redis lease per session on top of the in-process lock.
        self.coordinator = coordinator
        self.cipher = cipher or SnapshotCipher()
        self.redact = redact
        self.spec = session_spec(prefix)
        self.keep_versions = keep_versions
        self._locks_guard = threading.Lock()
        self._locks: dict[str, _SessionLock] = {}
        # The latest state of recently used sessions. With a Lite file this process is the only writer,
        # so the cache is the truth; against a server, a one-row version check validates it first.
        self._heads: OrderedDict[tuple[str, str, str], SessionState] = OrderedDict()
        self._exclusive = not getattr(store, "is_server", True)
        # Lite: sessions whose archiving row this process knows to be clear (it is the only writer). Readers
        # outside the session lock learn it too (archiving_marks), validated by _archivings: a begin_archive that
        # may have raced their read bumps it, and what they read is then not kept. Against a server another
        # replica may begin archiving at any time, unseen here: nothing is remembered there (_exclusive).
        self._clear: set[str] = set()
        self._archivings = 0
        # Lite: the id of every head row and uncommitted archiving mark that may exist
        # (acn/storage/repositories/listed_ids.py):
        # a new session's first call learns "version 0, not archiving" without a read.
        self.present = ListedIds(enabled=self._exclusive, what="session heads")
        self.listing: threading.Thread | None = None

    def open(self, *, background: bool = True) -> None:
        """Create and load the collection; on a Lite file, list its session heads (in the background)."""
        self.store.ensure(self.spec)
        if not self.present.enabled:
            return
        if background:
            self.listing = threading.Thread(target=self.list_present, name="acn-sessions-list", daemon=True)
            self.listing.start()
        else:
            self.list_present()

    def pending(self) -> list[str]:
        """Return what start-up work still runs in the background (for /readyz)."""
        return ["sessions_listed"] if self.listing is not None and self.listing.is_alive() else []

    def list_present(self) -> None:
        """List the ids of every session head and archiving mark left uncommitted (a request killed between
        begin_archive and its commit, maybe before the session's first head): one read, off the request path."""
        where = Filter("row == {lr} or row == {la}", {"lr": HEAD, "la": ARCHIVING})
        self.present.load(lambda: every_row(self.store, self.spec.name, where, ["id"]))

    @contextmanager
    def locked(self, tenant: str, namespace: Namespace) -> Iterator[None]:
        """Hold the session's lock: read-modify-commit sequences never interleave.

        The map holds a session's lock only while someone holds or waits for it: each entry counts its users
        and the last one out removes it, so the map stays as small as the number of sessions in use (every
        session ever touched would otherwise keep an entry for the life of the process).
        """
        key = _session_key(tenant, namespace)
        with self._locks_guard:
            entry = self._locks.get(key)
            if entry is None:
                entry = self._locks[key] = _SessionLock()
            entry.users += 1
        try:
            with entry.lock:
                if self.coordinator is None:
                    yield
                else:
                    with self.coordinator.hold(key):
                        yield
        finally:
            with self._locks_guard:
                entry.users -= 1
                if entry.users == 0:
                    del self._locks[key]

    @contextmanager
    def tenant_exclusive(self, tenant: str, what: str) -> Iterator[None]:
        """Hold a tenant-wide lock named `what` across server processes: the Redis lease when ACN_REDIS_URL is
        set (a tenant's imports), nothing more otherwise (the caller holds its in-process lock)."""
        if self.coordinator is None:
            yield
            return
        raw = json.dumps([tenant, what])
        with self.coordinator.hold("t" + hashlib.sha256(raw.encode("utf-8")).hexdigest()[:32]):
            yield

    def head(self, tenant: str, namespace: Namespace) -> SessionState:
        """Return the latest state (version 0 and empty when the session is new)."""
        key = (tenant, namespace.agent_id, namespace.session_id)
        with self._locks_guard:
            cached = self._heads.get(key)
        if cached is not None and self._exclusive:
            self._note_read(tenant, namespace, cached.version)
            return cached
        version = self._stored_version(tenant, namespace)
        lease = self._lease(tenant, namespace)
        if lease is not None and lease.read_version is None and lease.committed is not None:
            version = caught_up(lambda: self._stored_version(tenant, namespace), version, lease.committed,
                                absent_ok=True)
        self._note_read(tenant, namespace, version)
        if version == 0:
            if self._exclusive:  # no session yet, and only this process could write one (commit remembers it)
                self._remember(key, SessionState())
            return SessionState()
        if cached is not None and cached.version == version:
            return cached
        state = (read_visible(lambda: self.read(tenant, namespace, version), version) if lease is not None
                 else self.read(tenant, namespace, version))
        self._remember(key, state)
        return state

    def _remember(self, key: tuple[str, str, str], state: SessionState) -> None:
        with self._locks_guard:
            self._heads[key] = state
            self._heads.move_to_end(key)
            while len(self._heads) > HEAD_CACHE_SIZE:
                self._heads.popitem(last=False)

    def read(self, tenant: str, namespace: Namespace, version: int) -> SessionState:
        """Return the state at one version; 404 when it does not exist (or was pruned)."""
        rows = self._snapshot_parts(tenant, namespace, version)
        rows.sort(key=lambda row: row["part"])
        # Parts beyond `parts` are leftovers of an interrupted longer write of the same version.
        rows = rows[: rows[0]["parts"]] if rows else rows
        if not rows or [row["part"] for row in rows] != list(range(rows[0]["parts"])):
            raise NotFoundError(f"session {namespace.session_id!r} has no version {version}")
        return SessionState.model_validate_json(unpack(self.cipher.open("".join(row["chunk"] for row in rows))))

    def commit(self, tenant: str, namespace: Namespace, state: SessionState, *, reason: str,
               expected_version: int | None = None) -> SessionState:
        """Write state as the next version; a stale expected_version is a 409. Call under locked()."""
        lease = self._lease(tenant, namespace)
        if self.coordinator is not None and lease is None:
            raise RuntimeError("a session commit outside locked() while a coordinator is configured")
        current = self.head_version(tenant, namespace) if lease is None else self._fenced_head(lease, tenant,
                                                                                               namespace)
        if expected_version is not None and expected_version != current:
            raise ConflictError(f"session is at version {current}, not {expected_version}: reload and retry")
        new = state.model_copy(update={"version": current + 1, "reason": reason,
                                       "created_at": int(time.time() * 1000)})
        # Snapshot rows and the head row go in one upsert: one round trip, and the head never
        # points at a version whose rows were not sent with it.
        if self.redact:
            # Masked value by value, not over the JSON text: a phone kept as a number in meta or tool-call
            # arguments becomes a masked string instead of breaking the JSON; serve what a later read returns.
            new = SessionState.model_validate(redact_value(new.model_dump(mode="json"))[0])
        text = new.model_dump_json()
        head_row = self._head_row(tenant, namespace, new)
        done_row = self._archiving_row(tenant, namespace, new, COMMITTED)
        if lease is not None:
            # The last step before the write: still the holder, with the newest token (lease extended).
            self.coordinator.check(lease)  # type: ignore[union-attr]
            head_row["info"] = {"fence": lease.token}
            lease.read_version = new.version
        self.present.add([str(head_row["id"])])
        self.store.upsert(self.spec.name, [*self._snapshot_rows(tenant, namespace, new, text), head_row, done_row])
        if lease is not None:
            self.coordinator.note_committed(lease, new.version)  # type: ignore[union-attr]
        if self._exclusive:
            with self._locks_guard:
                self._mark_clear([_session_key(tenant, namespace)])
        self._remember((tenant, namespace.agent_id, namespace.session_id), new)
        self._prune(tenant, namespace, new.version)
        return new

    def archiving_left(self, tenant: str, namespace: Namespace) -> bool:
        """Return True when a request began archiving a turn of the session and never committed (it was killed, or
        its commit refused without its cleanup). Call under locked(), before archiving."""
        key = _session_key(tenant, namespace)
        if key in self._clear or self.present.absent(f"{key}:archiving"):
            return False
        # By primary key: a lookup Lite answers from its index, not a scan.
        rows = self.store.query(self.spec.name, Filter("id in {aid}", {"aid": [f"{key}:archiving"]}),
                                fields=["row", "tenant"], limit=1)
        left = bool(rows) and rows[0]["row"] == ARCHIVING and rows[0]["tenant"] == tenant
        if not left and self._exclusive:
            with self._locks_guard:
                self._mark_clear([key])
        return left

    def archiving_marks(self, tenant: str, sessions: Iterable[tuple[str, str]]) -> dict[tuple[str, str], int]:
        """Return, for each (agent_id, session_id) archiving a turn it has not committed, the last committed turn.

        Archive rows above that turn were written by a request still running or killed before its commit: readers
        leave them out until the commit (or the session's next turn sweeps them). One primary-key read; sessions
        this process knows to be clear (Lite, the only writer) are not read. Not under the session lock: a session
        read clear is remembered only when no begin_archive ran meanwhile (_archivings), so a focused assemble
        reads each session once, not once per search (issue 28: ~3 store round trips a call at 10k memories).
        """
        keys = {_session_key(tenant, Namespace(agent_id=agent, session_id=session)): (agent, session)
                for agent, session in sessions}
        with self._locks_guard:
            wanted = sorted(key for key in keys
                            if key not in self._clear and not self.present.absent(f"{key}:archiving"))
            archivings = self._archivings
        if not wanted:
            return {}
        ids = [f"{key}:archiving" for key in wanted]
        rows = self.store.query(self.spec.name, Filter("id in {aids}", {"aids": ids}),
                                fields=["id", "row", "tenant", "info"], limit=len(wanted))
        marks: dict[tuple[str, str], int] = {}
        for row in rows:
            pair = keys.get(str(row["id"]).removesuffix(":archiving"))
            if pair is not None and row["row"] == ARCHIVING and row["tenant"] == tenant:
                marks[pair] = int((row.get("info") or {}).get("turn") or 0)
        if self._exclusive:
            with self._locks_guard:
                if archivings == self._archivings:  # no begin_archive since the snapshot: what was read holds
                    self._mark_clear([key for key in wanted if keys[key] not in marks])
        return marks

    def _mark_clear(self, keys: list[str]) -> None:
        """Remember sessions as having no archiving mark (called with _locks_guard held)."""
        if len(self._clear) + len(keys) > CLEAR_SESSIONS:
            self._clear.clear()
        self._clear.update(keys)

    def begin_archive(self, tenant: str, namespace: Namespace, state: SessionState) -> None:
        """Mark the session as archiving a turn after `state` (cleared by the commit). Call under locked()."""
        key = _session_key(tenant, namespace)
        with self._locks_guard:
            self._clear.discard(key)
        self.present.add([f"{key}:archiving"])  # listed before the write, as a head is
        try:
            self.store.upsert(self.spec.name, [self._archiving_row(tenant, namespace, state, ARCHIVING)])
        finally:
            # Again once the row landed (or may have): an archiving_marks that read before it may have marked the
            # session clear in between; the bump makes one still reading drop what it read (see archiving_marks).
            with self._locks_guard:
                self._clear.discard(key)
                self._archivings += 1

    def _archiving_row(self, tenant: str, namespace: Namespace, state: SessionState, row: str) -> dict[str, Any]:
        return self._row(tenant, namespace, id=f"{_session_key(tenant, namespace)}:archiving", row=row,
                         version=state.version, part=0, parts=0, created_at=int(time.time() * 1000), chunk="",
                         info={"turn": state.turn})

    def head_version(self, tenant: str, namespace: Namespace) -> int:
        """Return the latest version number (0 for a new session)."""
        with self._locks_guard:
            cached = self._heads.get((tenant, namespace.agent_id, namespace.session_id))
        if cached is not None and self._exclusive:
            return cached.version
        return self._stored_version(tenant, namespace)

    def _lease(self, tenant: str, namespace: Namespace) -> Lease | None:
        if self.coordinator is None:
            return None
        return self.coordinator.current(_session_key(tenant, namespace))

    def _note_read(self, tenant: str, namespace: Namespace, version: int) -> None:
        """Remember the head version read under a lease: the commit refuses if it is no longer the head."""
        lease = self._lease(tenant, namespace)
        if lease is not None and lease.read_version is None:
            lease.read_version = version

    def _fenced_head(self, lease: Lease, tenant: str, namespace: Namespace) -> int:
        """Return the stored head version, refusing when a newer lease holder wrote since this one read."""
        version, fence = self._fenced_version(tenant, namespace)
        if lease.read_version is not None and version < lease.read_version:  # an older row, or none: read again
            # (the older row's fence is older too: from here only the version can say another holder wrote)
            version = caught_up(lambda: self._fenced_version(tenant, namespace)[0], version, lease.read_version)
        if fence > lease.token or (lease.read_version is not None and version != lease.read_version):
            lease.lost = True
            now = time.monotonic()
            raise LeaseLostError(f"session moved to version {version} under a newer lease while this request "
                                 f"held an expired one (it read version {lease.read_version} with token "
                                 f"{lease.token}, the head's is {fence}; held {now - lease.acquired:.1f} s, last "
                                 f"renewed {now - lease.renewed:.1f} s ago): nothing was written; reload and retry")
        return version

    def _fenced_version(self, tenant: str, namespace: Namespace) -> tuple[int, int]:
        """Return the stored head's version and the fencing token it was written under (0, 0 for none)."""
        rows = self._by_id(tenant, namespace, [_head_id(tenant, namespace)], ["version", "info"])
        if not rows:
            return 0, 0
        return int(rows[0]["version"]), int((rows[0]["info"] or {}).get("fence", 0))

    def _stored_version(self, tenant: str, namespace: Namespace) -> int:
        if self.present.absent(_head_id(tenant, namespace)):
            return 0  # no head was ever written for this session
        rows = self._by_id(tenant, namespace, [_head_id(tenant, namespace)], ["version"])
        return int(rows[0]["version"]) if rows else 0

    def _snapshot_parts(self, tenant: str, namespace: Namespace, version: int) -> list[Record]:
        """Return the stored parts of one version: part 0 by its id, then the others it counts by theirs."""
        fields = ["part", "parts", "chunk", "version"]
        key = _session_key(tenant, namespace)
        first = self._by_id(tenant, namespace, [f"{key}:v{version}:p0"], fields)
        parts = int(first[0]["parts"]) if first else 0
        rest = self._by_id(tenant, namespace, [f"{key}:v{version}:p{i}" for i in range(1, parts)], fields)
        rows = [row for row in [*first, *rest] if int(row["version"]) == version]
        if rows:
            return rows
        # Not under the ids commit writes (a pruned version, or rows some other writer stored): the scan answers.
        where = self._rows(tenant, namespace, SNAPSHOT).and_(Filter("version == {rv}", {"rv": version}))
        return self.store.query(self.spec.name, where, fields=fields, limit=10_000)

    def _by_id(self, tenant: str, namespace: Namespace, ids: list[str], fields: list[str]) -> list[Record]:
        """Return the session's rows with these ids, by primary key.

        The filter is `id in [...]` alone, the owner checked here: Milvus Lite answers that from its key index
        (1 ms), any other clause makes it scan every row of the collection (STORAGE.md, "Learned since").
        """
        if not ids:
            return []
        rows = self.store.query(self.spec.name, Filter("id in {session_row_ids}", {"session_row_ids": ids}),
                                fields=[*fields, "tenant", "agent_id", "session_id"], limit=len(ids))
        owner = (tenant, namespace.agent_id, namespace.session_id)
        return [row for row in rows if (row["tenant"], row["agent_id"], row["session_id"]) == owner]

    def heads_of(self, tenant: str, *, limit: int) -> list[Record]:
        """Return up to `limit` session heads of a whole tenant (agent_id, session_id, version, created_at)."""
        return self.store.query(self.spec.name, Filter("tenant == {ht} and row == {hr}", {"ht": tenant, "hr": HEAD}),
                                fields=["agent_id", "session_id", "version", "created_at"], limit=limit)

    def versions(self, tenant: str, namespace: Namespace) -> list[VersionInfo]:
        """Return every kept version, oldest first."""
        where = self._rows(tenant, namespace, SNAPSHOT).and_(Filter("part == 0"))
        rows = self.store.query(self.spec.name, where, fields=["version", "created_at", "info"], limit=16_384)
        infos = [VersionInfo(version=r["version"], created_at=r["created_at"], **r["info"]) for r in rows]
        return sorted(infos, key=lambda info: info.version)

    def delete(self, tenant: str, agent_id: str, session_id: str | None) -> None:
        """Delete every version of a session (or of all an agent's sessions)."""
        where = Filter("tenant == {dt} and agent_id == {da}", {"dt": tenant, "da": agent_id})
        if session_id:
            where = where.and_(Filter("session_id == {ds}", {"ds": session_id}))
        if self.coordinator is not None:  # the next lease must not wait for a version no store will show again
            sessions = [session_id] if session_id else [
                str(row["session_id"]) for row in every_row(self.store, self.spec.name,
                                                            where.and_(Filter("row == {dh}", {"dh": HEAD})),
                                                            ["session_id"])]
            self.coordinator.forget_versions([_session_key(tenant, Namespace(agent_id=agent_id, session_id=session))
                                              for session in sessions])
        self.store.delete(self.spec.name, where)
        with self._locks_guard:
            for key in [k for k in self._heads if k[:2] == (tenant, agent_id) and session_id in (None, k[2])]:
                del self._heads[key]

    def _snapshot_rows(self, tenant: str, namespace: Namespace, state: SessionState,
                       text: str) -> list[dict[str, Any]]:
        chunks = chunk_text(self.cipher.seal(pack(text)))
        info = {"reason": state.reason, "turn": state.turn, "buffer_messages": len(state.buffer),
                "segments": len(state.segments)}
        key = _session_key(tenant, namespace)
        rows = [self._row(tenant, namespace, id=f"{key}:v{state.version}:p{index}", row=SNAPSHOT,
                          version=state.version, part=index, parts=len(chunks), created_at=state.created_at,
                          chunk=chunk, info=info if index == 0 else {})
                for index, chunk in enumerate(chunks)]
        return rows

    def _head_row(self, tenant: str, namespace: Namespace, state: SessionState) -> dict[str, Any]:
        return self._row(tenant, namespace, id=_head_id(tenant, namespace), row=HEAD,
                         version=state.version, part=0, parts=0, created_at=state.created_at, chunk="", info={})

    def _prune(self, tenant: str, namespace: Namespace, latest: int) -> None:
        """Delete the versions that left the kept window since the last prune, by primary key.

        A filtered delete made Milvus Lite scan the whole collection: 9 ms with one chat, 216 ms with 32 chats of
        300 turns, so a turn cost more the more other sessions the store held (issue 47). The versions to go are
        known (PRUNE_REACH behind the window: this batch and one a killed process missed) and each one's first
        row says how many parts it has, so the delete names its rows.
        """
        oldest_kept = latest - self.keep_versions + 1
        if oldest_kept > 1 and latest % PRUNE_EVERY == 0:  # prune in batches, not on every write
            key = _session_key(tenant, namespace)
            firsts = [f"{key}:v{version}:p0" for version in range(max(1, oldest_kept - PRUNE_REACH), oldest_kept)]
            rows = self._by_id(tenant, namespace, firsts, ["version", "parts", "row"])
            ids = sorted(f"{key}:v{int(row['version'])}:p{part}" for row in rows if row["row"] == SNAPSHOT
                         for part in range(max(1, int(row["parts"]))))
            if ids:
                self.store.delete(self.spec.name, Filter("id in {pruned_ids}", {"pruned_ids": ids}))

    def _rows(self, tenant: str, namespace: Namespace, row: str) -> Filter:
        return Filter("tenant == {qt} and agent_id == {qa} and session_id == {qs} and row == {qr}",
                      {"qt": tenant, "qa": namespace.agent_id, "qs": namespace.session_id, "qr": row})

    def _row(self, tenant: str, namespace: Namespace, **fields: Any) -> dict[str, Any]:
        # The collection's only vector is a placeholder (Milvus requires one); it is never searched.
        return {"tenant": tenant, "agent_id": namespace.agent_id, "session_id": namespace.session_id,
                "dense": [1.0, 0.0], **fields}


def _session_key(tenant: str, namespace: Namespace) -> str:
    raw = json.dumps([tenant, namespace.agent_id, namespace.session_id])
    return "s" + hashlib.sha256(raw.encode("utf-8")).hexdigest()[:32]


def _head_id(tenant: str, namespace: Namespace) -> str:
    return f"{_session_key(tenant, namespace)}:head"
