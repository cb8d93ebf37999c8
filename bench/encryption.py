"""What encryption at rest costs: recall and speed with and without ACN_ENCRYPTION_KEY, side by side, in one run.

Run: .venv/bin/python -m bench.encryption [--conversations 1] [--seed-sessions 4] [--writes 200] [--reverse]

Four stores (BM25 only, no embedder): plain and encrypted, each searched by the in-process index (the Lite
default) and by the store's own BM25 (ACN_LOCAL_INDEX_ROWS=0, the path a Milvus server or an oversized session
takes, where the encrypted store ranks keyed token hashes). Each store records the first LoCoMo conversation(s)
and seed-style Chinese sessions turn by turn, then answers every question with a focused `assemble`
(max_tokens 1000) and a `memory_retrieve` over archived turns; finally `memory_write` writes single items.
Figures: LoCoMo evidence recall, seed clue hit rate, record_turn turns/s, memory_write items/s, retrieve and
assemble p50/p95. Writes bench/results/encryption.md. Not part of the test run.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.fernet import Fernet

from acn.common.settings import Settings
from bench.locomo import DEFAULT_DATA, load, message, turns_of
from bench.scoring import collect_ids, percentile, score
from bench.seed_suite import generate

BUDGET = 1000
CONFIGS = (("plain", False, 50_000), ("encrypted", True, 50_000),
           ("plain, store BM25", False, 0), ("encrypted, store BM25", True, 0))


@dataclass
class Figures:
    recall: list[float] = field(default_factory=list)
    clue: list[bool] = field(default_factory=list)
    record_seconds: float = 0.0
    turns: int = 0
    write_seconds: float = 0.0
    writes: int = 0
    retrieve_ms: list[float] = field(default_factory=list)
    assemble_ms: list[float] = field(default_factory=list)


def _post(client: Any, node: str, body: dict[str, Any]) -> tuple[dict[str, Any], float]:
    started = time.perf_counter()
    response = client.post(f"/v1/nodes/{node}", json=body)
    elapsed = (time.perf_counter() - started) * 1000
    assert response.status_code == 200, response.get_data(as_text=True)
    return dict(response.get_json()), elapsed


def measure(folder: Path, key: str, index_rows: int, conversations: list[Any], sessions: list[Any],
            writes: int) -> Figures:
    from acn.server import create_app

    app = create_app(Settings(milvus_uri=str(folder / "memory.db"), embedder="none", log_level="WARNING",
                              encryption_key=key, local_index_rows=index_rows, cache_dir=str(folder / "cache")))
    figures = Figures()
    client = app.test_client()
    try:
        # Not timed: the first calls wait for jieba's dictionary and warm the code paths.
        _post(client, "record_turn", {"agent_id": "warm-up", "session_id": "w", "messages": [
            {"role": "user", "content": "预热一下 warm up"}]})
        _post(client, "memory_retrieve", {"agent_id": "warm-up", "session_id": "w", "query": "预热"})
        for conversation in conversations:
            ns = {"agent_id": "locomo", "session_id": conversation.sample_id}
            turns = turns_of(conversation.lines)
            started = time.perf_counter()
            for turn in turns:
                _post(client, "record_turn", {**ns, "messages": [message(line) for line in turn]})
            figures.record_seconds += time.perf_counter() - started
            figures.turns += len(turns)
            texts = {line.dia_id: line.content for line in conversation.lines}
            for question in conversation.questions:
                body, ms = _post(client, "assemble", {**ns, "max_tokens": BUDGET, "mode": "focused",
                                                      "user_input": question.text})
                figures.assemble_ms.append(ms)
                ids = collect_ids(body["sources"], "dia_id")
                figures.recall.append(score(question.evidence, texts, body["prompt"], ids, question.answer)[0])
                _, ms = _post(client, "memory_retrieve", {**ns, "query": question.text, "kinds": ["turn"], "top_k": 5})
                figures.retrieve_ms.append(ms)
        for session in sessions:
            ns = {"agent_id": "seed", "session_id": session.id}
            started = time.perf_counter()
            for messages in session.turns:
                _post(client, "record_turn", {**ns, "messages": messages})
            figures.record_seconds += time.perf_counter() - started
            figures.turns += len(session.turns)
            for probe in session.probes:
                body, ms = _post(client, "assemble", {**ns, "max_tokens": BUDGET, "mode": "focused",
                                                      "user_input": probe.question})
                figures.assemble_ms.append(ms)
                figures.clue.append(probe.clue in body["prompt"])
        started = time.perf_counter()
        for number in range(writes):
            _post(client, "memory_write", {"agent_id": "writer", "session_id": "w", "items": [
                {"kind": "fact",
                 "content": f"订单 ORD-{number:05d} 的退款金额是 {number % 300} 元，customer #{number}"}]})
        figures.write_seconds = time.perf_counter() - started
        figures.writes = writes
    finally:
        app.extensions["acn"].close()
    return figures


def store_level(folder: Path, key: str, texts: list[str], queries: list[str], rounds: int) -> dict[str, Figures]:
    """Single-row saves and store BM25 searches at the repository, plain and encrypted alternating each round
    (a shared machine's load drifts: interleaving keeps it out of the ratio)."""
    from acn.common.models import Namespace
    from acn.memory.items import MemoryItem
    from acn.memory.write import new_memory
    from acn.storage.database.memory_rows import scope_filter
    from acn.storage.database.milvus import MilvusStore
    from acn.storage.database.sealed import RowSealer
    from acn.storage.repositories.memories import MemoryRepository

    store = MilvusStore(str(folder / "store-level.db")).open()
    repositories = {"plain": MemoryRepository(store, prefix="p", embedder=None, index_rows=0),
                    "encrypted": MemoryRepository(store, prefix="s", embedder=None, index_rows=0,
                                                  sealer=RowSealer(key))}
    figures = {label: Figures() for label in repositories}
    try:
        for repository in repositories.values():
            repository.open()
        per_round = len(texts) // rounds
        for number in range(rounds):
            order = list(repositories) if number % 2 == 0 else list(repositories)[::-1]
            for label in order:
                repository, ns = repositories[label], Namespace(agent_id="bench", session_id="s")
                started = time.perf_counter()
                for text in texts[number * per_round: (number + 1) * per_round]:
                    repository.save("t", [new_memory(ns, MemoryItem(content=text[:8000]), repository.now_ms("t", ns))])
                figures[label].write_seconds += time.perf_counter() - started
                figures[label].writes += per_round
                store.flush()
                for query in queries:
                    started = time.perf_counter()
                    repository.search("t", query, scope_filter(ns), limit=10)
                    figures[label].retrieve_ms.append((time.perf_counter() - started) * 1000)
    finally:
        store.close()
    return figures


def _p(values: list[float], q: float) -> str:
    return f"{percentile(sorted(values), q):.1f}" if values else "–"


def report(results: dict[str, Figures], command: str, questions: int, probes: int) -> str:
    lines = [f"Encryption at rest, side by side ({time.strftime('%Y-%m-%d')}, `{command}`; BM25 only, "
             f"{questions} LoCoMo questions, {probes} seed probes, focused assemble max_tokens={BUDGET})", "",
             "| store | LoCoMo evidence recall | seed clue hit | record_turn turns/s | memory_write items/s "
             "| retrieve p50 / p95 ms | assemble p50 / p95 ms |", "|---|---|---|---|---|---|---|"]
    for label, f in sorted(results.items(), key=lambda item: [c[0] for c in CONFIGS].index(item[0])):
        recall = f"{100 * statistics.mean(f.recall):.1f} %" if f.recall else "–"
        clue = f"{100 * statistics.mean(f.clue):.1f} %" if f.clue else "–"
        lines.append(f"| {label} | {recall} | {clue} | {f.turns / f.record_seconds:.1f} | "
                     f"{f.writes / f.write_seconds:.1f} | {_p(f.retrieve_ms, 0.5)} / {_p(f.retrieve_ms, 0.95)} | "
                     f"{_p(f.assemble_ms, 0.5)} / {_p(f.assemble_ms, 0.95)} |")
    return "\n".join(lines)


def store_report(figures: dict[str, Figures], rows: int, queries: int, rounds: int) -> str:
    lines = ["", f"Store level (MemoryRepository over one Lite file, in-process index off; {rows} single-row saves of "
             f"the same texts and {queries} BM25 searches after each of {rounds} rounds, plain and encrypted "
             "alternating):", "", "| collection | saves rows/s | store BM25 search p50 / p95 ms |", "|---|---|---|"]
    for label, f in figures.items():
        lines.append(f"| {label} | {f.writes / f.write_seconds:.1f} | {_p(f.retrieve_ms, 0.5)} / "
                     f"{_p(f.retrieve_ms, 0.95)} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="path of locomo10.json")
    parser.add_argument("--conversations", type=int, default=1, help="LoCoMo conversations (0: none)")
    parser.add_argument("--seed-sessions", type=int, default=4, help="seed-style Chinese sessions")
    parser.add_argument("--writes", type=int, default=200, help="single-item memory_write calls")
    parser.add_argument("--rounds", type=int, default=4, help="store-level rounds (0: skip that part)")
    parser.add_argument("--reverse", action="store_true", help="measure the stores in reverse order")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "encryption.md")
    args = parser.parse_args()
    conversations = load(args.data, args.conversations) if args.conversations else []
    sessions = generate(4, args.seed_sessions) if args.seed_sessions else []
    key = Fernet.generate_key().decode()
    results: dict[str, Figures] = {}
    with tempfile.TemporaryDirectory() as folder:
        for label, encrypted, index_rows in (CONFIGS[::-1] if args.reverse else CONFIGS):
            results[label] = measure(Path(folder) / label.replace(" ", "-").replace(",", ""),
                                     key if encrypted else "", index_rows, conversations, sessions, args.writes)
            print(label, "done", flush=True)
        lines = [line.content for c in conversations for line in c.lines]
        lines += [m["content"] for session in sessions for turn in session.turns for m in turn if m.get("content")]
        queries = [q.text for c in conversations for q in c.questions][:40] + [
            p.question for session in sessions for p in session.probes][:20]
        levels = store_level(Path(folder), key, lines, queries, args.rounds) if args.rounds and lines else {}
    command = (f"python -m bench.encryption --conversations {args.conversations} "
               f"--seed-sessions {args.seed_sessions} --writes {args.writes}" + (" --reverse" if args.reverse else ""))
    text = report(results, command, sum(len(c.questions) for c in conversations),
                  sum(len(s.probes) for s in sessions))
    if levels:
        text += "\n" + store_report(levels, len(lines) // args.rounds * args.rounds, len(queries), args.rounds)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
