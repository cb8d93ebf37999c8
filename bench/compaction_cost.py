"""How compaction cost grows with its input: `compact` (force, extractive) over 100 … 5,000 messages.

Run: .venv/bin/python -m bench.compaction_cost [--sizes 100,250,500,1000,5000] [--repeat 1]
     [--old /path/to/another/checkout [--old-timeout 60]]

With --old, each size is also timed with the compaction code of another checkout (e.g. a worktree at a29ecb3),
in a subprocess in the same run, so both columns see the same machine load.

The messages are a generated Chinese + English working conversation (parameters set and changed, decisions with
reasons, constraints, to-dos, amounts, dates and ids), about 90 bytes a message as in issue 16's report. Times
are of `compaction.engine.compact_turns` in process (what the node spends its CPU on; no store, no HTTP).
Not part of the test run.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path

from acn.common.models import Message
from acn.compaction.engine import compact_turns
from acn.text.tokens import load_tokenizer

DEFAULT_SIZES = (100, 250, 500, 1000, 5000)
SYSTEMS = ["对账", "支付", "退款", "物流", "会员", "库存", "发票", "风控", "清算", "报表"]
SERVICES = ["billing", "checkout", "search", "ledger", "notifier", "gateway", "payroll", "auth"]
PARAMS_ZH = ["超时", "重试次数", "并发数", "限额", "批量大小", "缓存时间", "阈值", "预算"]
PARAMS_EN = ["pool size", "timeout", "batch size", "retry limit", "cache ttl", "rate limit", "budget"]
REGIONS = ["eu-west-1", "us-east-2", "ap-south-1", "cn-north-1"]
# Names for parameters that appear once: a long working session keeps adding decisions no later one replaces,
# which is what makes the merged segment (and each merge) grow.
NAME_CHARS = ("天地玄黄宇宙洪荒日月盈昃辰宿列张寒来暑往秋收冬藏闰余成岁"
              "律吕调阳云腾致雨露结为霜金生丽水玉出昆冈剑号巨阙珠称夜光")


def _zh_turn(rng: random.Random, turn: int) -> tuple[str, str]:
    system, param, n = rng.choice(SYSTEMS), rng.choice(PARAMS_ZH), rng.randint(2, 120)
    choice = turn % 8
    if choice == 0:
        return f"{system}接口的{param}设为{n}。", f"已将{system}接口的{param}设为{n}。"
    if choice == 1:
        return (f"{param}改成{n + 5}，因为{system}高峰期比较慢。", f"好的，{param}已经改成{n + 5}。")
    if choice == 2:
        return (f"不要在{rng.randint(1, 12)}月{rng.randint(1, 28)}日之前动{system}的生产库。", "明白，不会动生产库。")
    if choice == 3:
        return (f"订单ORD-{rng.randint(10**7, 10**8 - 1)}的退款{rng.randint(2, 900)}元到账了吗？",
                f"退款已提交，预计{rng.randint(1, 7)}个工作日到账。")
    if choice == 4:
        return (f"那就决定用{system}新渠道，因为手续费只有{rng.randint(1, 30)}元。", "好的，已确认使用新渠道。")
    if choice == 5:
        return (f"下周还需要核对{rng.randint(1, 12)}月份的{system}对账单。", "好的，已添加待办。")
    if choice == 6:
        return (f"{system}账户{rng.randint(10**7, 10**8 - 1)}的余额是{rng.randint(1, 99)}万。", "已记录。")
    return "好的，谢谢", "不客气"


def _en_turn(rng: random.Random, turn: int) -> tuple[str, str]:
    service, param, n = rng.choice(SERVICES), rng.choice(PARAMS_EN), rng.randint(2, 120)
    choice = turn % 7
    if choice == 0:
        return f"Set the {service} {param} to {n}.", f"Done, the {service} {param} is now {n}."
    if choice == 1:
        return (f"Change the {param} to {n * 2} because traffic doubled.", f"The {param} is now {n * 2}.")
    if choice == 2:
        return (f"Let's go with {rng.choice(REGIONS)} since latency is {rng.randint(5, 80)} ms.", "Great, noted.")
    if choice == 3:
        return (f"Do not touch the {service} tables before March {rng.randint(1, 28)}.", "Understood.")
    if choice == 4:
        return (f"Invoice INV-{rng.randint(10**5, 10**6 - 1)} totals ${rng.randint(100, 90_000):,}.",
                "I've recorded the invoice.")
    if choice == 5:
        return f"We still need to load-test {service} next week.", "Noted, I'll schedule it."
    return "Thanks!", "You're welcome."


def _distinct_turn(rng: random.Random, turn: int) -> tuple[str, str]:
    """Return a decision on a parameter named only once (zh or en), with a reason and an id."""
    n, system, service = rng.randint(2, 120), rng.choice(SYSTEMS), rng.choice(SERVICES)
    if turn % 3:
        name = "".join(rng.choice(NAME_CHARS) for _ in range(3))
        return (f"决定把{name}参数设为{n}，因为{system}的{rng.choice(NAME_CHARS)}项比较慢，"
                f"编号{rng.randint(10**6, 10**7)}。",
                f"好的，已将{name}参数设为{n}，后续再跟进{system}的对账。")
    name = "".join(rng.choice("bcdfghklmnprstvz") + rng.choice("aeiou") for _ in range(3))
    return (f"We decided to set the {name} quota to {n} because the {service} team asked on ticket T-{turn}.",
            f"Done, the {name} quota is now {n}; I'll follow up with {service} next week.")


def conversation(messages: int, seed: int = 16) -> list[Message]:
    """Return `messages` user/assistant messages of a mixed zh/en conversation (deterministic for a seed)."""
    rng = random.Random(seed)
    result: list[Message] = []
    turn = 0
    while len(result) < messages:
        turn += 1
        maker = _distinct_turn if turn % 2 == 0 else _zh_turn if turn % 3 else _en_turn
        user, assistant = maker(rng, turn)
        result += [Message(role="user", content=user, turn=turn), Message(role="assistant", content=assistant,
                                                                            turn=turn)]
    return result[:messages]


def time_compaction(messages: list[Message], repeat: int = 1) -> float:
    """Return the best time of `repeat` compactions of the messages with the node's defaults (force)."""
    tokenizer = load_tokenizer("cl100k_base")
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        compact_turns(messages, [], segment_size=6, max_segments=5, engine="extractive", chat=None,
                      tokenizer=tokenizer)
        best = min(best, time.perf_counter() - started)
    return best


# Runs in a subprocess with another checkout first on sys.path: its compaction code, this file's conversation.
_OLD_TIMER = """
import importlib.util, json, sys
sys.path.insert(0, sys.argv[1])
spec = importlib.util.spec_from_file_location("compaction_cost_bench", sys.argv[2])
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)
print(json.dumps(bench.time_compaction(bench.conversation(int(sys.argv[3])), int(sys.argv[4]))))
"""


def time_old(checkout: str, size: int, repeat: int, timeout: float) -> str:
    """Return the time of the same compaction with another checkout's code ("> timeout" when it runs over)."""
    command = [sys.executable, "-c", _OLD_TIMER, checkout, str(Path(__file__).resolve()), str(size), str(repeat)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=checkout, check=True)
    except subprocess.TimeoutExpired:
        return f">{timeout:.0f}"
    return f"{json.loads(done.stdout.strip().splitlines()[-1]):.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default=",".join(str(size) for size in DEFAULT_SIZES))
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--old", default="", help="another checkout whose compaction code is timed too")
    parser.add_argument("--old-timeout", type=float, default=60.0, help="seconds before an old run is cut off")
    args = parser.parse_args()
    # CPU seconds beside wall seconds: these machines are shared, and a loaded one stretches the wall time.
    print("messages     bytes   seconds  cpu seconds" + ("   old seconds" if args.old else ""))
    for size in (int(part) for part in args.sizes.split(",")):
        messages = conversation(size)
        chars = sum(len(m.content.encode("utf-8")) for m in messages)
        cpu = time.process_time()
        wall = time_compaction(messages, args.repeat)
        line = f"{size:>8}  {chars:>8}  {wall:8.3f}  {(time.process_time() - cpu) / args.repeat:11.3f}"
        if args.old:
            line += f"  {time_old(args.old, size, args.repeat, args.old_timeout):>12}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
