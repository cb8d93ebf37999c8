"""Realistic conversations used by the compaction tests."""

from __future__ import annotations

from acn.common.models import Message

ZH_FINANCE_TURNS: list[tuple[str, str]] = [
    ("你好", "您好，很高兴为您服务。"),
    (
        "我想查一下订单ORD-20250317-8821的退款进度，另外我要在2026年6月30日之前把12万转到对公账户62938471。",
        "好的，订单ORD-20250317-8821的退款已经提交，预计3个工作日到账。",
    ),
    ("不要给我推荐新品，我只关心转账和退款。", "明白了，不会为您推荐新品。"),
    ("转账接口的超时设为30秒。", "已将超时设为30秒。"),
    ("好的，谢谢", "不客气"),
    ("超时改成45秒，因为银行接口高峰期比较慢。", "已经把超时改成45秒。"),
    ("转账用哪个渠道？", "建议使用企业网银渠道，单笔限额50万。"),
    ("那就决定用企业网银渠道，因为限额够用。", "好的，已确认使用企业网银渠道。"),
    ("嗯嗯", "还有什么可以帮您？"),
    ("帮我确认一下手续费是多少。", "企业网银跨行转账手续费为每笔15元。"),
    ("收到", "好的"),
    ("对公账户62938471的开户行是招商银行上海分行。", "已记录开户行：招商银行上海分行。"),
    ("转账需要分两笔吗？", "12万低于单笔限额50万，一笔即可完成。"),
    ("好的，那就一笔转。", "好的。已为您生成转账申请单TR-88213，待您的财务审批。"),
    ("审批人是王经理，手机号13812345678。", "已通知王经理，审批通过后会短信提醒。"),
    ("谢谢啦", "不客气的"),
    ("退款什么时候能到？", "订单ORD-20250317-8821的退款金额为2,399元，预计3月20日原路返回。"),
    ("记住，所有通知都发到邮箱finance@example.com。", "好的，通知邮箱已设为finance@example.com。"),
    ("下周还需要帮我核对一下3月份的对账单。", "好的，已添加待办：核对3月份对账单。"),
    ("好的，谢谢，再见", "再见，祝您工作顺利！"),
]

EN_PROJECT_TURNS: list[tuple[str, str]] = [
    ("Hi there!", "Hello! How can I help?"),
    (
        "I need to migrate our billing service to Postgres 16 before March 31, 2026. The budget is $45,000.",
        "Got it. I've created ticket MIG-4471 for the migration.",
    ),
    ("Do not touch the legacy invoice tables.", "Understood, the legacy invoice tables stay as they are."),
    ("Set the connection pool size to 20.", "The pool size is now 20."),
    ("Thanks!", "You're welcome."),
    (
        "Change the pool size to 50 because peak traffic doubled.",
        "Done, the pool size is now 50.",
    ),
    ("Which region should we use?", "eu-west-1 has the lowest latency for your users, about 18 ms."),
    ("Let's go with eu-west-1 since most customers are in Europe.", "Great, eu-west-1 it is."),
    ("We still need to load-test the new cluster next week.", "Noted, I'll schedule the load test."),
    ("Okay, sounds good.", "Anything else?"),
]


def conversation(turns: list[tuple[str, str]], first_turn: int = 1) -> list[Message]:
    """Return user/assistant messages with turn numbers from (user, assistant) pairs."""
    messages: list[Message] = []
    for offset, (user, assistant) in enumerate(turns):
        number = first_turn + offset
        messages.append(Message(role="user", content=user, turn=number))
        messages.append(Message(role="assistant", content=assistant, turn=number))
    return messages
