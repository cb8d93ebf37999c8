"""A 60-turn Chinese customer-service conversation with facts buried early (issue 3's scenario)."""

from __future__ import annotations

import json
from typing import Any

# Turn -> (user, assistant) for the turns that carry facts; every other turn is noise.
FACT_TURNS: dict[int, tuple[str, str]] = {
    3: ("我的订单号是ORD-20250317-8821，帮我查一下物流。", "已查到订单ORD-20250317-8821，正在派送中。"),
    10: ("我是VIP，已开通自动退款。", "好的，已确认您是VIP客户，自动退款权限已开通。"),
    12: ("不要给我推荐新品。", "明白，之后不会再给您推荐新品。"),
    20: ("把对账接口的超时设为30秒。", "已将对账接口的超时设为30秒。"),
    25: ("6月30日前把12万转到对公账户62938471。", "好的，已记录：6月30日前转账12万到对公账户62938471。"),
    35: ("对账接口的超时改成45秒，因为高峰期银行接口慢。", "已将对账接口的超时改成45秒。"),
}
PLEASANTRIES = [("好的", "好的呢～"), ("谢谢", "不客气！"), ("嗯嗯", "还有什么可以帮您？"), ("收到", "好的"),
                ("明白了", "有问题随时找我。")]
FAQ = [
    ("退货运费谁承担？", "非质量问题的退货运费由买家承担，质量问题由商家承担。"),
    ("发票怎么开？", "订单完成后可在“我的订单”里申请电子发票。"),
    ("会员积分怎么用？", "积分可在结算时抵扣，100积分抵1元。"),
    ("周末客服上班吗？", "客服7×24小时在线。"),
    ("能改收货地址吗？", "未发货前可以在订单详情里修改收货地址。"),
]
# (buried fact, what must be in the assembled context)
LIVE_FACTS = ["ORD-20250317-8821", "VIP", "自动退款", "推荐新品", "45秒", "6月30日", "12万", "62938471"]
SUPERSEDED = "30秒"
QUESTIONS = {
    "ORD-20250317-8821": "我之前那个订单号是多少？",
    "VIP": "我是什么会员？",
    "自动退款": "我之前开通了什么退款权限？",
    "推荐新品": "我之前对推荐有什么要求？",
    "45秒": "对账接口的超时现在是多少？",
    "6月30日": "转账的截止日期是哪天？",
    "12万": "要转多少钱？",
    "62938471": "要转到哪个对公账户？",
}


def tool_json(turn: int) -> str:
    """Return a large logistics tool result (the kind of JSON that floods a context)."""
    events = [{"time": f"2025-03-{18 + i % 10:02d} 1{i % 10}:00", "location": f"分拣中心{i}",
               "status": "in_transit", "operator": f"op-{1000 + i}", "note": "包裹已到达，正在处理" * 2}
              for i in range(25)]
    return json.dumps({"order_id": f"ORD-LOG-{turn:04d}", "status": "in_transit", "carrier": "SF",
                       "events": events}, ensure_ascii=False)


def turn_messages(turn: int) -> list[dict[str, Any]]:
    """Return the messages of one turn, with a tool call and its result every seventh turn."""
    if turn in FACT_TURNS:
        user, assistant = FACT_TURNS[turn]
    elif turn % 3 == 0:
        user, assistant = FAQ[turn % len(FAQ)]
    else:
        user, assistant = PLEASANTRIES[turn % len(PLEASANTRIES)]
    messages: list[dict[str, Any]] = [{"role": "user", "content": user, "meta": {"msg_id": f"u{turn}"}}]
    if turn % 7 == 0:
        call_id = f"call_{turn}"
        messages.append({"role": "assistant", "content": "", "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": "query_logistics", "arguments": "{}"}}]})
        messages.append({"role": "tool", "tool_call_id": call_id, "name": "query_logistics",
                         "content": tool_json(turn)})
    messages.append({"role": "assistant", "content": assistant, "meta": {"msg_id": f"a{turn}"}})
    return messages
