"""Chats at the plateau against young chats, in one process, turn by turn side by side: CPU a turn of each, and
where the difference goes (issue 47: 32 chats of 1,000 turns should serve 0.8 × the turns/s of 32 of 50).

Run: .venv/bin/python -m bench.plateau [--chats 8] [--old 1000] [--young 50] [--steps 100] [--embedder none]

The old chats are played untimed to turn --old; then each step plays one turn of every old chat, then one turn of
every young chat (turns 1..--young, then new chats), the chat of bench.long_session. CPU is the process's (Milvus
Lite runs in it, on its own threads, and so do the background workers), so the ratio young / old is what a
CPU-bound server's turns/s ratio would be, without two servers and a client sharing two cores (whose noise the
side-by-side HTTP run of `bench.long_session --concurrent` has to average out). Each phase's figure is the
calling thread's CPU inside it; "other threads" is the process's CPU less the request thread's. Not part of the
test run.
"""

from __future__ import annotations

import argparse
import importlib
import random
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.long_session import BUDGET, Post, answer_message, open_client, report, user_message

# (label, module, attribute): the pipeline steps timed, each a module-level function or a method looked up at
# call time, none calling another of them.
PHASES = [
    ("assemble: candidates (search, rank, render)", "acn.assembly.assemble", "layer_candidates"),
    ("assemble: fit the layers", "acn.assembly.assemble", "fit_layers"),
    ("assemble: drop repeats", "acn.assembly.assemble", "without_repeats"),
    ("assemble: response", "acn.assembly.assemble", "build_response"),
    ("record_turn: archive mark", "acn.storage.repositories.sessions", "SessionRepository.begin_archive"),
    ("record_turn: archive rows", "acn.recording.record_turn", "archive_batch"),
    ("record_turn: edit the buffer", "acn.recording.record_turn", "edited_buffer"),
    ("record_turn: extract and write memories", "acn.recording.record_turn", "write_memories"),
    ("record_turn: compaction", "acn.recording.record_turn", "maybe_compact"),
    ("record_turn: commit the state", "acn.storage.repositories.sessions", "SessionRepository.commit"),
]
REQUEST = "request thread"
OTHER = "other threads (Milvus Lite, background workers)"


class Clock:
    """CPU seconds spent, by (kind of chat, phase); `kind` is the kind of the turn being played."""

    def __init__(self) -> None:
        self.kind = ""
        self.spent: defaultdict[tuple[str, str], float] = defaultdict(float)

    def add(self, phase: str, seconds: float) -> None:
        if self.kind:
            self.spent[(self.kind, phase)] += seconds


@contextmanager
def timed_phases(clock: Clock) -> Iterator[None]:
    """Wrap each PHASES function so that the calling thread's CPU inside it is added to the clock."""
    restore: list[tuple[Any, str, Any]] = []
    for label, module_name, attribute in PHASES:
        owner: Any = importlib.import_module(module_name)
        *path, name = attribute.split(".")
        for part in path:
            owner = getattr(owner, part)
        original = getattr(owner, name)
        restore.append((owner, name, original))
        setattr(owner, name, _clocked(original, label, clock))
    try:
        yield
    finally:
        for owner, name, original in reversed(restore):
            setattr(owner, name, original)


def _clocked(function: Callable[..., Any], label: str, clock: Clock) -> Callable[..., Any]:
    def clocked(*args: Any, **kwargs: Any) -> Any:
        started = time.thread_time()
        try:
            return function(*args, **kwargs)
        finally:
            clock.add(label, time.thread_time() - started)
    return clocked


def play_turn(post: Post, session_id: str, turn: int, rng: random.Random) -> None:
    """One turn of the chat: a focused assemble, then record_turn; a refused call stops the run."""
    ns = {"agent_id": "kefu", "session_id": session_id}
    user = user_message(turn, rng)
    context = post("/v1/nodes/assemble", {**ns, "mode": "focused", "max_tokens": BUDGET, "user_input": user})
    recorded = post("/v1/nodes/record_turn", {**ns, "messages": [
        {"role": "user", "content": user}, {"role": "assistant", "content": answer_message(turn, rng)}]})
    if not (context.get("ok") and recorded.get("ok")):
        raise SystemExit(f"{session_id} turn {turn}: {str(context)[:300]} {str(recorded)[:300]}")


def side_by_side(chats: int, old: int, young: int, steps: int, embedder: str) -> Clock:
    """Play the run; return the CPU it measured."""
    clock = Clock()
    old_rngs = [random.Random(i) for i in range(chats)]
    young_rngs = [random.Random(1000 + i) for i in range(chats)]
    with tempfile.TemporaryDirectory() as folder, open_client(embedder, False, folder) as post:
        for turn in range(1, old + 1):
            for i in range(chats):
                play_turn(post, f"old-{i}", turn, old_rngs[i])
        with timed_phases(clock):
            for step in range(steps):
                for kind in ("old", "young"):
                    clock.kind = kind
                    process, thread = time.process_time(), time.thread_time()
                    for i in range(chats):
                        if kind == "old":
                            play_turn(post, f"old-{i}", old + 1 + step, old_rngs[i])
                        else:
                            play_turn(post, f"young-{step // young}-{i}", step % young + 1, young_rngs[i])
                    own = time.thread_time() - thread
                    clock.add(REQUEST, own)
                    clock.add(OTHER, time.process_time() - process - own)
                    clock.kind = ""
    return clock


def table(clock: Clock, turns: int, chats: int, old: int, young: int, steps: int, embedder: str) -> str:
    """Return the Markdown table: ms of CPU a turn by phase, young and old, and the ratio of the totals."""
    def ms(kind: str, phase: str) -> float:
        return clock.spent[(kind, phase)] * 1000 / turns

    totals = {kind: ms(kind, REQUEST) + ms(kind, OTHER)
              for kind in ("young", "old")}
    rows = [label for label, _, _ in PHASES]
    lines = [f"### {chats} chats at turns {old + 1}–{old + steps} beside {chats} young ones (turns 1–{young}), "
             f"`{embedder}`, in process ({time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC)", "",
             "| CPU ms a turn | young | old | old − young |", "|---|---|---|---|"]
    for label in [*rows, REQUEST, OTHER]:
        lines.append(f"| {label} | {ms('young', label):.2f} | {ms('old', label):.2f} | "
                     f"{ms('old', label) - ms('young', label):+.2f} |")
    rest = {kind: ms(kind, REQUEST) - sum(ms(kind, label) for label in rows) for kind in ("young", "old")}
    lines.append(f"| request thread, outside these phases (HTTP, validation, state read) | {rest['young']:.2f} | "
                 f"{rest['old']:.2f} | {rest['old'] - rest['young']:+.2f} |")
    lines.append(f"| **total** | **{totals['young']:.1f}** | **{totals['old']:.1f}** | "
                 f"{totals['old'] - totals['young']:+.1f} |")
    lines += ["", f"Young / old CPU a turn: **{totals['young'] / totals['old']:.3f}** "
              "(the turns/s ratio of a CPU-bound server; issue 47 asks ≥ 0.8)."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chats", type=int, default=8, help="old chats, and young ones beside them")
    parser.add_argument("--old", type=int, default=1000, help="the old chats' turn when timing starts")
    parser.add_argument("--young", type=int, default=50, help="a young chat's turns before a new one starts")
    parser.add_argument("--steps", type=int, default=100, help="turns timed of each chat")
    parser.add_argument("--embedder", default="none")
    parser.add_argument("--out", type=Path, help="append the table to this Markdown file")
    args = parser.parse_args()
    if min(args.chats, args.young, args.steps) < 1 or args.old < 0:
        parser.error("--chats, --young and --steps must be at least 1, --old at least 0")
    clock = side_by_side(args.chats, args.old, args.young, args.steps, args.embedder)
    result = table(clock, args.chats * args.steps, args.chats, args.old, args.young, args.steps, args.embedder)
    report(result, args.out)


if __name__ == "__main__":
    main()
