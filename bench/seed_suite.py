"""Seed-style Chinese sessions (long task-oriented chats), generated deterministically: facts buried early, noise
after.

Every session is one of four domains (customer service, a data-cleaning task, a finance transfer, a travel
booking) and 40–80 turns long. Facts — identity and membership, preferences and refusals, order numbers,
amounts, deadlines, parameters — are stated in the first third; some parameters change later (the old value
must not be served). Pleasantries, FAQ chatter and large tool JSON fill the rest. The questions at the end are
generated from the same templates as the facts, so nothing is hand-tuned to the retriever.

`generate(seed, sessions)` is pure: the same seed gives the same suite.
"""
# ruff: noqa: E501 (the templates read better as one Chinese sentence per line)

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Probe:
    """A question about a buried fact: `clue` must be in the context; `stale` (if any) must not be alone."""

    question: str
    clue: str
    kind: str
    stale: str | None = None


@dataclass
class Session:
    """One generated conversation: its turns (lists of chat messages) and the probes asked after it."""

    id: str
    domain: str
    turns: list[list[dict[str, Any]]] = field(default_factory=list)
    probes: list[Probe] = field(default_factory=list)


@dataclass(frozen=True)
class Fact:
    """A statement (user, assistant reply) and the probe that asks about it."""

    user: str
    assistant: str
    probe: Probe
    change: tuple[str, str] | None = None  # a later (user, assistant) that supersedes the value


SURNAMES = "王李张刘陈杨黄赵吴周徐孙马朱胡郭何林罗高"
GIVEN = ["伟", "芳", "娜", "敏", "静", "磊", "洋", "艳", "勇", "军", "杰", "娟", "涛", "明", "超", "霞"]
CITIES = ["北京", "上海", "广州", "深圳", "成都", "杭州", "西安", "重庆", "南京", "武汉", "厦门", "青岛"]
HOTELS = ["锦江之星", "全季酒店", "亚朵酒店", "汉庭酒店", "维也纳酒店", "希尔顿欢朋"]
BANKS = ["工商银行", "建设银行", "招商银行", "农业银行", "中国银行"]
TIERS = ["VIP", "Plus会员", "黄金会员", "钻石会员", "企业客户"]
PLEASANTRIES = [("好的", "好的呢～"), ("谢谢", "不客气！"), ("嗯嗯", "还有什么可以帮您？"), ("收到", "好的"),
                ("明白了", "有问题随时找我。"), ("辛苦了", "应该的～"), ("OK", "好的，随时联系。")]
FAQ = {
    "customer_service": [("退货运费谁承担？", "非质量问题的退货运费由买家承担，质量问题由商家承担。"),
                         ("发票怎么开？", "订单完成后可在“我的订单”里申请电子发票。"),
                         ("周末客服上班吗？", "客服7×24小时在线。"),
                         ("能改收货地址吗？", "未发货前可以在订单详情里修改收货地址。")],
    "data_cleaning": [("pandas读大文件有什么技巧？", "可以用chunksize分块读取，或者指定dtype减少内存。"),
                      ("去重用什么函数？", "drop_duplicates，可以指定subset列。"),
                      ("日期列怎么解析？", "read_csv时传parse_dates，或之后用to_datetime。"),
                      ("怎么看缺失值比例？", "df.isna().mean()可以看每列的缺失比例。")],
    "finance_transfer": [("跨行转账要手续费吗？", "网银跨行转账目前免手续费。"),
                         ("大额转账几点前能到账？", "工作日17点前提交的大额转账当天到账。"),
                         ("转账限额怎么调整？", "可以在网银的安全设置里调整单日限额。"),
                         ("对公账户能收个人转账吗？", "可以，但需要备注用途。")],
    "travel_booking": [("机票可以改签吗？", "起飞前可以改签，按舱位收取改签费。"),
                       ("酒店几点入住？", "一般14点后可以入住，12点前退房。"),
                       ("行李额是多少？", "经济舱一般免费托运20公斤。"),
                       ("能开行程单吗？", "出行后可以在订单里申请电子行程单。")],
}
DOMAINS = list(FAQ)


def generate(seed: int = 4, sessions: int = 32) -> list[Session]:
    """Return the suite: `sessions` conversations, domains in rotation, every draw from one seeded RNG."""
    rng = random.Random(seed)
    return [build_session(rng, index, DOMAINS[index % len(DOMAINS)]) for index in range(sessions)]


def build_session(rng: random.Random, index: int, domain: str) -> Session:
    """Return one session: facts in the first third, changes in the middle, noise everywhere else."""
    length = rng.randint(40, 80)
    facts = FACTS[domain](rng)
    rng.shuffle(facts)
    early = sorted(rng.sample(range(2, max(length // 3, len(facts) + 3)), len(facts)))
    middle = list(range(length // 2, length - 6))
    script: dict[int, tuple[str, str]] = {}
    for turn, fact in zip(early, facts, strict=True):
        script[turn] = (fact.user, fact.assistant)
        if fact.change:
            later = rng.choice([t for t in middle if t not in script])
            script[later] = fact.change
    session = Session(id=f"seed-{index:02d}-{domain}", domain=domain, probes=[f.probe for f in facts])
    for turn in range(1, length + 1):
        session.turns.append(turn_messages(rng, turn, domain, script.get(turn)))
    return session


def turn_messages(rng: random.Random, turn: int, domain: str, said: tuple[str, str] | None) -> list[dict[str, Any]]:
    """Return one turn: a scripted fact, or FAQ chatter / a pleasantry; a tool call with large JSON every 7th."""
    if said:
        user, assistant = said
    elif rng.random() < 0.5:
        user, assistant = rng.choice(FAQ[domain])
    else:
        user, assistant = rng.choice(PLEASANTRIES)
    messages: list[dict[str, Any]] = [{"role": "user", "content": user}]
    if turn % 7 == 0:
        call = f"call_{turn}"
        messages.append({"role": "assistant", "content": "", "tool_calls": [
            {"id": call, "type": "function", "function": {"name": "query_records", "arguments": "{}"}}]})
        messages.append({"role": "tool", "tool_call_id": call, "name": "query_records",
                         "content": tool_json(rng, turn)})
    messages.append({"role": "assistant", "content": assistant})
    return messages


def tool_json(rng: random.Random, turn: int) -> str:
    """Return a large tool result full of numbers that are not the facts asked about."""
    rows = [{"time": f"2025-0{rng.randint(1, 9)}-{rng.randint(10, 28)} {rng.randint(10, 23)}:00",
             "id": f"R{rng.randint(100000, 999999)}", "value": rng.randint(1, 9999),
             "status": rng.choice(["ok", "pending", "retry"]), "note": "记录已同步，等待下一步处理"}
            for _ in range(20)]
    return json.dumps({"page": turn, "total": 20, "rows": rows}, ensure_ascii=False)


def _ask(rng: random.Random, *phrasings: str) -> str:
    """Return one phrasing of a question: the direct one, a paraphrase, or a back-reference."""
    return rng.choice(phrasings)


def _name(rng: random.Random) -> str:
    return rng.choice(SURNAMES) + rng.choice(GIVEN) + (rng.choice(GIVEN) if rng.random() < 0.5 else "")


def _date(rng: random.Random) -> str:
    return f"{rng.randint(1, 12)}月{rng.randint(1, 28)}日"


def customer_service(rng: random.Random) -> list[Fact]:
    order = f"ORD-2025{rng.randint(1, 12):02d}{rng.randint(10, 28)}-{rng.randint(1000, 9999)}"
    tier = rng.choice(TIERS)
    refund = rng.randint(59, 899)
    phone_tail = str(rng.randint(1000, 9999))
    return [
        Fact(f"我的订单号是{order}，帮我查一下物流。", f"已查到订单{order}，正在派送中。",
             Probe(_ask(rng, "我之前那个订单号是多少？", "刚开始让你查物流的是哪一单？", "帮我再看下那单的单号"), order, "order")),
        Fact(f"我是{tier}，已经开通了自动退款。", f"好的，已确认您是{tier}，自动退款已开通。",
             Probe(_ask(rng, "我是什么会员来着？", "我的账号是什么等级？", "你还记得我的身份吗？"), tier, "identity")),
        Fact("不要给我推荐新品，我只买老款。", "明白，之后不会再给您推荐新品。",
             Probe(_ask(rng, "我之前对推荐有什么要求？", "有新款上市可以发给我看看吗？", "我说过不想收到什么来着？"), "不要给我推荐新品", "refusal")),
        Fact(f"那件外套退款{refund}元，原路退回。", f"好的，退款{refund}元将原路退回。",
             Probe(_ask(rng, "外套的退款金额是多少？", "那件外套能退我多少钱？", "退款到账应该是多少？"), f"{refund}元", "amount")),
        Fact(f"快递到了打我尾号{phone_tail}的电话。", f"好的，快递员会联系尾号{phone_tail}的号码。",
             Probe(_ask(rng, "快递到了联系哪个号码？", "送货的时候打哪个电话？", "派送员会打给谁？"), phone_tail, "contact")),
    ]


def data_cleaning(rng: random.Random) -> list[Fact]:
    rows = rng.randint(8, 60)
    old_t, new_t = rng.sample([0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9], 2)
    column = rng.choice(["amount", "price", "balance", "quantity"])
    deadline = _date(rng)
    return [
        Fact(f"数据在CSV里，大约{rows}万行，编码是GBK。", f"好的，{rows}万行GBK编码的CSV，我用分块读取。",
             Probe(_ask(rng, "那份数据大概有多少行？", "数据量有多大来着？", "那个CSV文件多大？"), f"{rows}万行", "amount")),
        Fact(f"去重的相似度阈值设为{old_t}。", f"已将去重阈值设为{old_t}。",
             Probe(_ask(rng, "现在去重的相似度阈值是多少？", "去重用的阈值定的多少？", "相似度超过多少算重复？"), str(new_t), "parameter", stale=str(old_t)),
             change=(f"去重的相似度阈值改成{new_t}，之前的太松了。", f"已将去重阈值改成{new_t}。")),
        Fact(f"{column}列的空值用中位数填充，因为数据偏态。", f"好的，{column}列空值改用中位数填充。",
             Probe(_ask(rng, f"{column}列的空值怎么处理？", f"{column}缺失的时候填什么？", "缺失值的填充方式定了吗？"), "中位数", "decision")),
        Fact(f"这个清洗任务{deadline}之前要交付。", f"收到，{deadline}前交付。",
             Probe(_ask(rng, "清洗任务的截止日期是哪天？", "这个任务最晚什么时候交？", "交付时间是哪天来着？"), deadline, "deadline")),
        Fact("不要删除任何原始列，只能新增列。", "明白，保留所有原始列，只新增列。",
             Probe(_ask(rng, "之前对原始列有什么限制？", "可以把没用的列删掉吗？", "列的处理上我提过什么要求？"), "不要删除任何原始列", "refusal")),
    ]


def finance_transfer(rng: random.Random) -> list[Fact]:
    amount = f"{rng.randint(2, 90)}万"
    account = str(rng.randint(10_000_000, 99_999_999))
    deadline = _date(rng)
    bank = rng.choice(BANKS)
    old_limit, new_limit = rng.sample([5, 10, 20, 30, 50], 2)
    return [
        Fact(f"{deadline}前把{amount}转到对公账户{account}。", f"好的，已记录：{deadline}前转账{amount}到对公账户{account}。",
             Probe(_ask(rng, "要转到哪个对公账户？", "收款账号是多少？", "钱打到哪个账户？"), account, "account")),
        Fact(f"这笔钱一共是{amount}，用途是货款。", f"明白，货款{amount}。",
             Probe(_ask(rng, "要转多少钱？", "货款总额是多少？", "这次一共付多少？"), amount, "amount")),
        Fact(f"收款行是{bank}。", f"好的，收款行{bank}。", Probe(_ask(rng, "收款银行是哪家？", "对方是哪个银行的？", "收款行定的是哪个？"), bank, "fact")),
        Fact(f"转账截止是{deadline}，晚了要罚款。", f"收到，{deadline}是最后期限。",
             Probe(_ask(rng, "转账的截止日期是哪天？", "最晚哪天要把钱转过去？", "什么时候之前必须付款？"), deadline, "deadline")),
        Fact(f"单日转账限额设为{old_limit}万。", f"已将单日限额设为{old_limit}万。",
             Probe(_ask(rng, "单日转账限额现在是多少？", "一天最多能转多少？", "限额定的多少来着？"), f"{new_limit}万", "parameter", stale=f"{old_limit}万"),
             change=(f"单日转账限额改成{new_limit}万。", f"已将单日限额改成{new_limit}万。")),
    ]


def travel_booking(rng: random.Random) -> list[Fact]:
    city = rng.choice(CITIES)
    hotel = rng.choice(HOTELS)
    budget_old, budget_new = rng.sample([400, 500, 600, 800, 1000], 2)
    passenger = _name(rng)
    date = _date(rng)
    return [
        Fact(f"我叫{passenger}，机票上写这个名字。", f"好的，乘机人{passenger}。",
             Probe(_ask(rng, "我之前说的乘机人叫什么？", "机票上写谁的名字？", "你还记得我叫什么吗？"), passenger, "identity")),
        Fact(f"{date}去{city}出差，订早上的航班。", f"好的，{date}飞{city}的早班机。",
             Probe(_ask(rng, "我哪天去出差？", "航班是哪天的？", f"去{city}是几号？"), date, "deadline")),
        Fact(f"酒店每晚预算设为{budget_old}元。", f"已将酒店预算设为每晚{budget_old}元。",
             Probe(_ask(rng, "酒店每晚的预算现在是多少？", "住宿一晚最多花多少？", "酒店价格上限是多少？"), f"{budget_new}元", "parameter", stale=f"{budget_old}元"),
             change=(f"酒店每晚预算改成{budget_new}元吧。", f"已将酒店预算改成每晚{budget_new}元。")),
        Fact(f"我喜欢住{hotel}，别订民宿。", f"明白，优先{hotel}，不订民宿。",
             Probe(_ask(rng, "我喜欢住哪家酒店？", "住宿我有偏好吗？", "订哪个牌子的酒店？"), hotel, "preference")),
        Fact("我不坐红眼航班。", "好的，不会给您订红眼航班。",
             Probe(_ask(rng, "我之前对航班有什么要求？", "凌晨的航班可以吗？", "订机票要注意什么？"), "红眼航班", "refusal")),
    ]


FACTS = {"customer_service": customer_service, "data_cleaning": data_cleaning,
         "finance_transfer": finance_transfer, "travel_booking": travel_booking}
