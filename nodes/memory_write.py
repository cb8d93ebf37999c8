"""MemoryWrite: event-based writes with dedup, supersede by key, and versions."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, cast

from pydantic import BeforeValidator, Field, field_validator

from common.deps import Deps
from common.errors import ConflictError, ValidationError
from common.models import (
    KEY_PATTERN,
    Memory,
    MemoryKind,
    Message,
    MessageList,
    MetaObject,
    Namespace,
    NodeResponse,
    Scope,
    StrictModel,
    TurnNumber,
    parse_json_string,
)
from nodes.spec import Description, NodeSpec
from storage.base import Filter
from storage.memories import (
    MemoryRepository,
    Stamp,
    kinds_filter,
    live_filter,
    new_memory_id,
    scope_filter,
    tenant_filter,
)
from text.events import extract_events
from text.numbers import extract_key_numbers
from text.pii import redact_pii, redact_value
from text.similarity import normalise, shingle_similarity, shingles

# Rule-based importance, never model-judged (seed 004 §4.2): identity 8, rules/knowledge 7, preferences 6 …
DEFAULT_IMPORTANCE: dict[str, float] = {
    "identity": 8, "knowledge": 7, "constraint": 7, "decision": 7, "preference": 6,
    "fact": 5, "todo": 5, "artifact": 5, "summary": 4, "turn": 3,
}
SUPERSEDING_KINDS = ("decision", "constraint", "preference")
MAX_CONTENT_CHARS = 8000
DEDUPE_CANDIDATES = 5
# A batch loads the namespace's live memories of its kinds once when there are at most this many.
POOL_LIMIT = 2000


class MemoryItem(StrictModel):
    """One memory to write."""

    kind: MemoryKind = Field(default="fact", description="What the memory is; decides default importance.")
    content: str = Field(min_length=1, max_length=MAX_CONTENT_CHARS, description="The memory text.")
    key: str | None = Field(
        default=None, max_length=128, pattern=KEY_PATTERN,
        description="Topic key: a new decision/constraint/preference with the same key supersedes the old one.",
    )
    importance: float | None = Field(default=None, ge=0, le=10, description="0–10; default by kind.")
    scope: Scope = Field(default="session", description="session | user | agent | shared.")
    meta: MetaObject = Field(default_factory=dict, description="Caller provenance, stored untouched "
                             "(message_index, part and parts, when given, must be non-negative integers).")
    turn: TurnNumber | None = Field(default=None, description="Turn the memory comes from.")
    turn_range: list[TurnNumber] | None = Field(default=None, min_length=2, max_length=2, description="[from, to].")

    @field_validator("content")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("content is empty")
        return value.strip()


class MemoryWriteRequest(Namespace):
    """Write memories explicitly (items) and/or extract them from messages."""

    items: Annotated[list[MemoryItem], BeforeValidator(parse_json_string)] = Field(
        default_factory=list, max_length=500, description="Memories to write (a JSON string of the list works too)."
    )
    messages: MessageList = Field(default_factory=list, max_length=500)
    extract: bool = Field(
        default=False, description="Extract events (identity, preferences, constraints, …) from messages.")
    dedupe_threshold: float = Field(
        default=0.9, ge=0.5, le=1.0, description="Similarity at or above which a write updates.")
    redact_pii: bool = Field(
        default=False, description="Mask phone, ID-card, bank-card numbers and e-mails (content and meta) "
                                   "before storing.")


Action = Literal["added", "updated", "duplicate", "superseded"]


class WriteResult(StrictModel):
    id: str
    action: Action
    version: int
    kind: MemoryKind
    content: str
    superseded_ids: list[str] = Field(default_factory=list)


class MemoryWriteResponse(NodeResponse):
    results: list[WriteResult]
    extracted: int = Field(default=0, description="How many items came from extraction.")


def run(request: MemoryWriteRequest, deps: Deps) -> MemoryWriteResponse:
    """Write every item (explicit, then extracted), deduplicating and superseding by key."""
    memories = repository(deps)
    extracted = extracted_items(request.messages) if request.extract else []
    if not request.items and not (request.extract and request.messages):
        raise ValidationError("nothing to write: give items, or messages with extract: true")
    items = [*request.items, *extracted]
    if request.redact_pii:
        items = [item.model_copy(update={"content": redact_pii(item.content)[0], "meta": redact_value(item.meta)[0]})
                 for item in items]
    results = write_items(memories, deps.tenant, request, items, request.dedupe_threshold)
    return MemoryWriteResponse(results=results, extracted=len(extracted))


def write_items(memories: MemoryRepository, tenant: str, namespace: Namespace, items: list[MemoryItem],
                threshold: float) -> list[WriteResult]:
    """Write a batch: decide each item against what is stored and what the batch wrote, save once."""
    if any(item.scope == "user" for item in items) and not namespace.user_id:
        raise ValidationError("scope 'user' needs a user_id")
    # Dedup and supersede read before they write: one namespace's writes must not interleave.
    with memories.namespace_lock(tenant, namespace):
        pool = Pool.load(memories, tenant, namespace, items)
        results = [write_item(pool, namespace, item, threshold) for item in items]
        pool.save()
        pool.park()
    return results


def repository(deps: Deps) -> MemoryRepository:
    """Return the memory repository of these deps."""
    repo = deps.providers.get("memories")
    if not isinstance(repo, MemoryRepository):
        raise ValidationError("no memory store is configured")
    return repo


def extracted_items(messages: list[Message]) -> list[MemoryItem]:
    """Return the memory items that rule-based event extraction finds in the messages."""
    items = []
    for message in messages:
        if message.role not in ("user", "assistant"):
            continue
        for event in extract_events(message.content, role=message.role):
            items.append(MemoryItem(kind=cast(MemoryKind, event.kind), content=event.content[:MAX_CONTENT_CHARS],
                                    key=event.key, meta=message.meta, turn=message.turn))
    return items


@dataclass(frozen=True)
class Known:
    """What dedup needs of a stored memory; the full row is read only for the few that change."""

    id: str
    content: str
    scope: str
    kind: MemoryKind
    key: str | None
    version: int


KNOWN_FIELDS = ["id", "content", "scope", "kind", "key", "version"]


def known(memory: Memory | dict[str, Any]) -> Known:
    """Return the dedup view of a memory or of a light store row."""
    if isinstance(memory, Memory):
        return Known(memory.id, memory.content, memory.scope, memory.kind, memory.key, memory.version)
    return Known(memory["id"], memory["content"], memory["scope"], memory["kind"], memory["key"] or None,
                 int(memory["version"]))


class Pool:
    """The live memories a batch can collide with, loaded in one query; the batch's writes saved in one upsert.

    Near-duplicates are found through an inverted index of character bigrams, so a batch of n items against
    m stored memories costs the postings it touches, not n × m comparisons. A namespace too large to load
    (more than POOL_LIMIT rows of the batch's kinds) falls back to a BM25 search and a save per item.
    """

    def __init__(self, memories: MemoryRepository, tenant: str, loaded: list[Known] | None,
                 namespace: Namespace | None = None, key: Hashable = None, stamp: Stamp | None = None) -> None:
        self.memories, self.tenant = memories, tenant
        self.exhaustive = loaded is not None
        # With a Lite file an index of every kind outlives the batch: parked after a save, it serves the next
        # batch of the same namespace and scopes unless another write to the agent (or to the shared scope)
        # happened in between.
        self.namespace, self.key, self.stamp = namespace, key, stamp
        self.live: dict[str, Known] = {}
        self.grams: dict[str, frozenset[str]] = {}
        self.postings: dict[tuple[str, str, str], set[str]] = defaultdict(set)
        self.pending: dict[str, Memory] = {}
        self.stored: dict[str, Memory] = {}  # full rows as stored, when the pool loaded them
        self.new_ids: set[str] = set()
        for memory in loaded or []:
            self._index(memory)

    @classmethod
    def load(cls, memories: MemoryRepository, tenant: str, namespace: Namespace, items: list[MemoryItem]) -> Pool:
        scopes = sorted({item.scope for item in items})
        kinds = sorted({item.kind for item in items})
        live = scope_filter(namespace, scopes).and_(live_filter(False))
        if items and "turn" not in kinds:  # every kind but archived messages: the next batch may bring others
            key = ("dedup pool", tenant, namespace.agent_id, live.cache_key())
            parked = memories.unpark(tenant, namespace.agent_id, key)
            if isinstance(parked, Pool):
                return parked
            stamp = memories.stamp(tenant, namespace.agent_id)
            # Whole rows: a supersede or an update needs the full memory, and a lookup by id scans a large
            # Lite collection (~150 ms at 100k rows).
            found = memories.find(tenant, live.and_(kinds_filter(None, exclude_turns=True)), limit=POOL_LIMIT + 1,
                                  within=namespace)
            if len(found) <= POOL_LIMIT:
                pool = cls(memories, tenant, [known(m) for m in found], namespace, key, stamp)
                pool.stored = {m.id: m for m in found}
                return pool
        where = live.and_(kinds_filter(kinds, exclude_turns=False))
        rows = memories.store.query(memories.spec.name, tenant_filter(tenant).and_(where), fields=KNOWN_FIELDS,
                                    limit=POOL_LIMIT + 1) if items else []
        return cls(memories, tenant, [known(row) for row in rows] if len(rows) <= POOL_LIMIT else None, namespace)

    def full(self, memory_id: str) -> Memory:
        """Return the complete memory (as this batch left it, else as stored)."""
        if memory_id in self.pending:
            return self.pending[memory_id]
        if memory_id in self.stored:
            return self.stored[memory_id]
        memory = self.memories.get(self.tenant, memory_id)
        if memory is None:
            raise ConflictError(f"memory {memory_id} vanished while writing; retry")
        return memory

    def same_key(self, item: MemoryItem) -> list[Memory]:
        """Return the live memories of this item's scope and kind with the same key."""
        if not self.exhaustive:
            return [m for m in self.memories.find(self.tenant, self._own(item), limit=100, within=self._namespace())
                    if m.key == item.key]
        return [self.full(m.id) for m in self.live.values()
                if m.scope == item.scope and m.kind == item.kind and m.key == item.key]

    def nearest(self, item: MemoryItem, floor: float) -> tuple[float, Known] | None:
        """Return the most similar live memory of this item's scope and kind if its similarity reaches floor."""
        target = shingles(item.content)
        if not self.exhaustive:
            found = [known(s.memory) for s in self.memories.search(self.tenant, item.content, self._own(item),
                                                                    limit=DEDUPE_CANDIDATES,
                                                                    within=self._namespace())]
            scored = [(shingle_similarity(shingles(m.content), target), m) for m in found]
            best_found = max(scored, key=lambda pair: pair[0], default=None)
            return best_found if best_found is not None and best_found[0] >= floor else None
        if not target:
            return None
        # Prefix filter: Dice >= floor needs an overlap of at least floor·|A|/(2 − floor) of the item's |A|
        # grams, so such a memory holds one of any |A| − overlap + 1 of them. Only the postings of the rarest
        # are read (common bigrams have postings as long as the pool); each candidate is then scored exactly.
        postings = sorted((self.postings.get((item.scope, item.kind, gram), ()) for gram in target), key=len)
        needed = max(1, math.ceil(floor * len(target) / (2 - floor) - 1e-9))
        candidates: set[str] = set().union(*postings[: len(target) - needed + 1])
        scored_ids = ((2 * len(target & self.grams[mid]) / (len(target) + len(self.grams[mid])), mid)
                      for mid in candidates)
        score, best = max(scored_ids, default=(0.0, ""))  # ties go to one fixed memory: the greatest id
        return (score, self.live[best]) if best and score >= floor else None

    def add(self, *created: Memory) -> None:
        """Record memories created by this batch (inserted, not upserted)."""
        self.new_ids.update(m.id for m in created)
        self.put(*created)

    def put(self, *changed: Memory) -> None:
        """Record new or changed memories (closed ones leave the live pool)."""
        for memory in changed:
            self.pending[memory.id] = memory
            self._unindex(memory.id)
            if not memory.valid_to:
                self._index(known(memory))
        if not self.exhaustive:
            self.save()

    def save(self) -> None:
        """Write everything pending in one upsert."""
        if self.pending:
            written = list(self.pending.values())
            self.memories.save(self.tenant, written, new_ids=self.new_ids)
            if self.stamp is not None:  # a parkable pool keeps what it wrote as the stored rows
                self.stored.update(self.pending)
            self.pending, self.new_ids = {}, set()
            if self.stamp is not None and self.namespace is not None:
                # This write is reflected here (the counters move as the repository moves them); any other
                # write since the load is not, and makes the stamps differ.
                epoch, agent, shared = self.stamp
                self.stamp = (epoch, agent + any(m.agent_id == self.namespace.agent_id for m in written),
                              shared + any(m.scope == "shared" for m in written))

    def park(self) -> None:
        """Keep the index for the next batch (only if it is complete and nothing else wrote meanwhile)."""
        if self.stamp is not None and self.namespace is not None and not self.pending \
                and len(self.live) <= POOL_LIMIT:
            self.memories.park(self.tenant, self.namespace.agent_id, self.key, self, self.stamp)

    def _index(self, memory: Known) -> None:
        grams = shingles(memory.content)
        self.live[memory.id], self.grams[memory.id] = memory, grams
        for gram in grams:
            self.postings[(memory.scope, memory.kind, gram)].add(memory.id)

    def _unindex(self, memory_id: str) -> None:
        old = self.live.pop(memory_id, None)
        if old is not None:
            for gram in self.grams.pop(memory_id):
                self.postings[(old.scope, old.kind, gram)].discard(memory_id)

    def _namespace(self) -> Namespace:
        if self.namespace is None:
            raise RuntimeError("a pool that searches the store needs its namespace")
        return self.namespace

    def _own(self, item: MemoryItem) -> Filter:
        """Return the filter of the live memories this item can collide with: its kind, in its scope of this
        namespace (another agent's or session's memories never count as duplicates)."""
        return (scope_filter(self._namespace(), [item.scope]).and_(live_filter(False))
                .and_(kinds_filter([item.kind], exclude_turns=False)))


def write_item(pool: Pool, namespace: Namespace, item: MemoryItem, threshold: float) -> WriteResult:
    """Decide one item: duplicate, update in place, supersede by key, or add."""
    now = pool.memories.now_ms(pool.tenant, namespace)
    if item.key and item.kind in SUPERSEDING_KINDS:
        same_key = pool.same_key(item)
        if same_key:
            return supersede(pool, namespace, item, same_key, now)
    nearest = pool.nearest(item, threshold)
    if nearest is not None:
        score, best = nearest
        if normalise(best.content) == normalise(item.content):
            return result(best, "duplicate")
        if score >= threshold and not numbers_conflict(best.content, item.content):
            return update_in_place(pool, pool.full(best.id), item, now)
    memory = new_memory(namespace, item, now)
    pool.add(memory)
    return result(memory, "added")


def numbers_conflict(old: str, new: str) -> bool:
    """Return True when the new text drops a number of the old one: a different fact, not an update.

    "订单 A0001" and "订单 A0002" are textually near-identical but are two orders; an update may add
    detail ("张江路100号" → "张江路100号3楼") but never silently replace a value.
    """
    old_values = {n.value for n in extract_key_numbers(old)}
    new_values = {n.value for n in extract_key_numbers(new)}
    return not old_values <= new_values


def supersede(pool: Pool, namespace: Namespace, item: MemoryItem, old: list[Memory], now: int) -> WriteResult:
    """Add the new memory and close the old ones (valid_to, superseded_by); history stays queryable."""
    if any(normalise(m.content) == normalise(item.content) for m in old):
        return result(next(m for m in old if normalise(m.content) == normalise(item.content)), "duplicate")
    memory = new_memory(namespace, item, now)
    memory.version = max(m.version for m in old) + 1
    memory.history = [history_entry(m) for m in sorted(old, key=lambda m: m.updated_at)]
    closed = [m.model_copy(update={"valid_to": now, "superseded_by": memory.id, "updated_at": now}) for m in old]
    pool.add(memory)
    pool.put(*closed)
    return result(memory, "superseded", superseded_ids=[m.id for m in old])


def update_in_place(pool: Pool, old: Memory, item: MemoryItem, now: int) -> WriteResult:
    """Replace a near-duplicate's text, bump its version and keep the old text in its history."""
    updated = old.model_copy(update={
        "content": item.content, "version": old.version + 1, "updated_at": now,
        "importance": max(old.importance, importance_of(item)),
        "history": [*(old.history or []), history_entry(old)],
        "meta": {**old.meta, **item.meta}, "turn_range": merged_range(old.turn_range, item_range(item)),
    })
    pool.put(updated)
    return result(updated, "updated")


def new_memory(namespace: Namespace, item: MemoryItem, now: int) -> Memory:
    """Return a fresh memory for an item."""
    return Memory(
        id=new_memory_id(), kind=item.kind, content=item.content, key=item.key, importance=importance_of(item),
        scope=item.scope, agent_id=namespace.agent_id, session_id=namespace.session_id,
        user_id=namespace.user_id, created_at=now, updated_at=now, version=1, turn_range=item_range(item),
        meta=item.meta,
    )


def importance_of(item: MemoryItem) -> float:
    """Return the item's importance, defaulting by kind."""
    return item.importance if item.importance is not None else DEFAULT_IMPORTANCE[item.kind]


def item_range(item: MemoryItem) -> list[int] | None:
    """Return the item's turn range, from turn_range or turn."""
    if item.turn_range:
        return sorted(item.turn_range)
    return [item.turn, item.turn] if item.turn is not None else None


def merged_range(a: list[int] | None, b: list[int] | None) -> list[int] | None:
    """Return the span of two turn ranges."""
    if not a or not b:
        return a or b
    return [min(a[0], b[0]), max(a[1], b[1])]


def history_entry(memory: Memory) -> dict[str, Any]:
    """Return what history keeps of an earlier version."""
    return {"version": memory.version, "content": memory.content, "updated_at": memory.updated_at,
            "id": memory.id}


def result(memory: Memory | Known, action: Action, superseded_ids: list[str] | None = None) -> WriteResult:
    return WriteResult(id=memory.id, action=action, version=memory.version, kind=memory.kind,
                       content=memory.content, superseded_ids=superseded_ids or [])


NODE = NodeSpec(
    name="memory_write",
    request_model=MemoryWriteRequest,
    response_model=MemoryWriteResponse,
    run=run,
    summary="Write memories (explicit or extracted) with dedup, supersede and versions",
    description=Description(
        human_en="Store facts, preferences, constraints and decisions outside the context window. "
                 "Duplicates update in place; a new value with the same key supersedes the old one.",
        human_zh="把事实、偏好、约束和决策存到上下文窗口之外。相似内容原地更新并升版本；同一 key 的新值会取代旧值。",
        llm_en="Save durable information about the user or task (identity, preferences, constraints, decisions, "
               "key numbers) so it can be retrieved in later turns. Pass items, or messages with extract=true.",
        llm_zh="保存用户或任务的持久信息（身份、偏好、约束、决策、关键数字），供后续轮次检索。"
               "传 items，或传 messages 并设 extract=true。",
    ),
)
