"""The 60-turn customer-service scenario, measured: tokens per turn, compression, numbers, buried facts.

Run: .venv/bin/python -m bench.long_conversation [--window 2000] [--budget 2000]
Prints a table and writes bench/results/long_conversation.md. Not part of the test run.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from acn.common.models import Message
from acn.common.settings import Settings
from acn.server import create_app
from acn.text.tokens import load_tokenizer
from tests.long_conversation import LIVE_FACTS, QUESTIONS, SUPERSEDED, turn_messages

MODES = ("snapshot", "focused", "streaming", "auto")
SYSTEM = "你是XX电商平台的客服助手，语气亲切，不得承诺超出政策范围的内容。"


def run(window: int, budget: int) -> dict[str, Any]:
    """Record 60 turns, assembling a context before each, and return the figures."""
    tokenizer = load_tokenizer()
    with tempfile.TemporaryDirectory() as folder:
        app = create_app(Settings(milvus_uri=str(Path(folder) / "memory.db"), log_level="WARNING"))
        client = app.test_client()
        ns = {"agent_id": "bench", "session_id": "s60"}
        raw: list[dict[str, Any]] = []
        per_mode: dict[str, list[int]] = {m: [] for m in MODES}
        full_history: list[int] = []
        record_ms: list[float] = []
        numbers = {"in_source": 0, "preserved": 0, "restored": 0}
        for turn in range(1, 61):
            messages = turn_messages(turn)
            user = messages[0]["content"]
            for mode in MODES:
                body = client.post("/v1/nodes/assemble", json={**ns, "max_tokens": budget, "mode": mode,
                                                                "system_prompt": SYSTEM, "user_input": user}).get_json()
                per_mode[mode].append(body["tokens"]["total"])
            everything = [{"role": "system", "content": SYSTEM}, *raw, {"role": "user", "content": user}]
            full_history.append(sum(tokenizer.count_message(Message(**m)) for m in everything))
            started = time.perf_counter()
            result = client.post("/v1/nodes/record_turn", json={**ns, "messages": messages,
                                                                 "compaction": {"context_window": window}}).get_json()
            record_ms.append((time.perf_counter() - started) * 1000)
            stats = result["compaction"]["stats"]
            if result["compaction"]["compacted"]:
                numbers["in_source"] += stats["numbers_in_source"]
                numbers["preserved"] += stats["numbers_preserved"]
                numbers["restored"] += stats["numbers_restored"]
            raw += [{k: v for k, v in m.items() if k != "meta"} for m in messages]
        state = client.post("/v1/nodes/session_state", json=ns).get_json()
        kept = sum(s["tokens"] for s in state["segments"]) + sum(
            tokenizer.count_message(Message(**m)) for m in state["buffer"])
        raw_tokens = sum(tokenizer.count_message(Message(**m)) for m in raw)
        hits = {mode: fact_hits(client, ns, mode, budget) for mode in MODES}
        app.extensions["acn"].close()
    return {"per_mode": per_mode, "full_history": full_history, "record_ms": record_ms, "numbers": numbers,
            "raw_tokens": raw_tokens, "kept_tokens": kept, "segments": len(state["segments"]), "hits": hits}


def fact_hits(client: Any, ns: dict[str, str], mode: str, budget: int) -> tuple[int, int, int]:
    """Return (questions whose fact is in the context, questions, contexts serving the superseded value)."""
    found = stale = 0
    for fact, question in QUESTIONS.items():
        prompt = client.post("/v1/nodes/assemble", json={**ns, "max_tokens": budget, "mode": mode,
                                                          "system_prompt": SYSTEM, "user_input": question}
                             ).get_json()["prompt"]
        found += fact in prompt
        stale += SUPERSEDED in prompt and "45秒" not in prompt
    return found, len(QUESTIONS), stale


def report(figures: dict[str, Any], window: int, budget: int) -> str:
    """Return the Markdown table of the figures."""
    full = figures["full_history"]
    lines = [f"60-turn scenario, context_window={window}, assemble max_tokens={budget} "
             f"({time.strftime('%Y-%m-%d')}, `python -m bench.long_conversation`)", "",
             "| context | mean tokens/turn | at turn 60 | buried facts in context | stale served |",
             "|---|---|---|---|---|",
             f"| full history (baseline) | {statistics.mean(full):.0f} | {full[-1]} | 8/8 | yes (30秒 and 45秒) |"]
    for mode in MODES:
        tokens = figures["per_mode"][mode]
        found, total, stale = figures["hits"][mode]
        lines.append(f"| {mode} | {statistics.mean(tokens):.0f} | {tokens[-1]} | {found}/{total} | {stale} |")
    numbers = figures["numbers"]
    kept = numbers["preserved"] + numbers["restored"]
    record = sorted(figures["record_ms"])
    lines += ["",
              f"- stored working state after 60 turns: {figures['kept_tokens']} tokens "
              f"({figures['segments']} segments + buffer) for {figures['raw_tokens']} raw tokens: "
              f"compression ratio {figures['kept_tokens'] / figures['raw_tokens']:.3f}",
              f"- numbers in compacted turns: {numbers['in_source']}, kept {kept} "
              f"({numbers['preserved']} by the engine, {numbers['restored']} restored by the verifier)",
              f"- record_turn p50 {record[len(record) // 2]:.1f} ms, p95 {record[int(len(record) * 0.95)]:.1f} ms "
              "(in process, Milvus Lite)",
              f"- live facts checked: {', '.join(LIVE_FACTS)}; superseded: {SUPERSEDED}"]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--window", type=int, default=2000, help="compaction context_window")
    parser.add_argument("--budget", type=int, default=2000, help="assemble max_tokens")
    args = parser.parse_args()
    text = report(run(args.window, args.budget), args.window, args.budget)
    print(text)
    out = Path(__file__).resolve().parent / "results" / "long_conversation.md"
    out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
