"""Pleasantries and empty acknowledgements in Chinese and English."""

from __future__ import annotations

import re

# Whole-message acknowledgements that carry no content. A message is a pleasantry only when,
# after removing these phrases, punctuation and emoji, nothing is left: "好的，超时改成30秒" keeps
# "超时改成30秒" and so is content.
_PHRASES_ZH = [
    "好的呢", "好的", "好滴", "好哒", "好嘞", "好吧", "好呀", "好啊", "好", "嗯嗯", "嗯呢", "嗯", "哦哦", "哦", "噢",
    "收到啦", "收到了", "收到", "谢谢你", "谢谢您", "谢谢啦", "谢谢", "多谢", "感谢", "非常感谢", "太感谢了",
    "明白了", "明白", "了解了", "了解", "知道了", "懂了", "清楚了", "没问题", "可以的", "可以", "行的", "行",
    "继续吧", "继续", "好的继续", "ok", "okay", "是的", "对的", "对", "嗯好", "辛苦了", "辛苦", "麻烦了",
    "不客气", "不用谢", "没事", "没关系", "你好", "您好", "哈喽", "早上好", "晚上好", "再见", "拜拜",
    "我理解了", "让我想想", "请稍等", "稍等", "好的我明白了", "我明白了", "我知道了", "哈哈", "哈哈哈", "呵呵",
    "很高兴为您服务", "很高兴为你服务", "还有什么可以帮您", "还有什么可以帮你", "还有其他问题吗",
    "请问还有什么可以帮您的吗", "请问还有什么可以帮您", "不客气的", "的", "了", "啦", "呢", "哈", "呀", "吧",
]
_PHRASES_EN = [
    "thank you so much", "thank you very much", "thanks a lot", "thank you", "thanks", "thx", "ty",
    "got it", "sounds good", "sounds great", "makes sense", "understood", "i see", "i understand",
    "okay", "ok", "k", "sure", "yes", "yep", "yeah", "alright", "all right", "right", "great", "cool",
    "nice", "perfect", "awesome", "continue", "go on", "go ahead", "please continue", "hello", "hi",
    "hey", "good morning", "good evening", "bye", "goodbye", "see you", "you're welcome", "no problem",
    "np", "let me think", "one moment", "hmm", "hm", "uh huh", "noted", "will do", "glad to help",
    "happy to help", "anything else", "is there anything else i can help with", "let me know",
    "i'm glad i could help", "you are welcome", "cheers", "lol", "haha",
]
_ZH_PATTERN = re.compile("|".join(re.escape(p) for p in sorted(_PHRASES_ZH, key=len, reverse=True)))
_EN_PATTERN = re.compile(
    r"\b(?:" + "|".join(re.escape(p) for p in sorted(_PHRASES_EN, key=len, reverse=True)) + r")\b",
    re.IGNORECASE,
)
_FILLER = re.compile(r"[\s\W_]+", re.UNICODE)
MAX_PLEASANTRY_CHARS = 80


def strip_pleasantries(text: str) -> str:
    """Return what is left of text once acknowledgements, punctuation and emoji are removed."""
    rest = _EN_PATTERN.sub(" ", text)
    rest = _ZH_PATTERN.sub(" ", rest)
    return _FILLER.sub("", rest)


def is_pleasantry(text: str) -> bool:
    """Return True when a message is only greetings, thanks or acknowledgement (no content)."""
    stripped = text.strip()
    if not stripped:
        return True
    if len(stripped) > MAX_PLEASANTRY_CHARS:
        return False
    return strip_pleasantries(stripped) == ""
