"""Key-number candidates skip the patterns whose required characters a text lacks, with identical results.

`_candidates` used to run every pattern of `PATTERNS` over every text (39 finditer passes); a compaction turn spent
about half its CPU there, mostly on sentences with no digit at all. The reference below is that loop, verbatim: the
guarded one must return the same list, in the same order, over real corpora (the seed suite, the PII corpus, the
zh-daily suite, LoCoMo when ../shared/data has it, the number tests' sentences; each message alone and in windows
of six joined as compaction joins a segment's turns) and over random strings drawn from the patterns' own
characters, where a wrong guard would show at once.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from acn.text import number_patterns, numbers
from acn.text.number_patterns import FOLD, PATTERNS
from acn.text.numbers import _candidates, _clean_edges, _trim, extract_key_numbers, key_values

LOCOMO = Path(__file__).resolve().parents[3] / "shared" / "data" / "locomo" / "locomo10.json"


def _candidates_reference(folded: str) -> list[tuple[int, int, int, str]]:
    """The unguarded loop (main before the pre-filter): every pattern over the whole text."""
    found = []
    for priority, (kind, pattern) in enumerate(PATTERNS):
        for match in pattern.finditer(folded):
            start, end = match.span("v") if "v" in pattern.groupindex else match.span()
            start, end = _trim(folded, start, end)
            if end > start and _clean_edges(folded, start, end):
                found.append((start, end, priority, kind))
    return found


def _messages() -> Iterator[list[str]]:
    """Conversations as lists of message texts."""
    from bench import seed_suite, zh_daily
    from tests import test_pii_corpus, test_text_numbers

    for session in seed_suite.generate():
        yield [str(message.get("content") or "") for turn in session.turns for message in turn]
    for seed in zh_daily.seeds("dev", 3) + zh_daily.seeds("test", 3):
        yield [message.text for message in zh_daily.generate(seed).messages]
    yield [text for text, _, _ in test_pii_corpus.POSITIVES] + list(test_pii_corpus.NEGATIVES)
    yield [value for name, value in vars(test_text_numbers).items() if name.isupper() and isinstance(value, str)]
    yield _strings_in(Path(test_text_numbers.__file__).read_text(encoding="utf-8"))
    if LOCOMO.exists():
        for sample in json.loads(LOCOMO.read_text(encoding="utf-8"))[:3]:
            sessions = [value for key, value in sample["conversation"].items()
                        if key.startswith("session_") and isinstance(value, list)]
            yield [str(turn.get("text", "")) for session in sessions for turn in session]


def _strings_in(source: str) -> list[str]:
    """The string literals of a test module (its example sentences)."""
    import ast

    return [node.value for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)]


def corpus() -> list[str]:
    """Every message alone, and windows of six joined by newlines (a segment's source text)."""
    texts: list[str] = []
    for conversation in _messages():
        texts += conversation
        texts += ["\n".join(conversation[at:at + 6]) for at in range(0, len(conversation), 3)]
    return list(dict.fromkeys(texts))


# Characters the patterns name (digits, separators, units, currency, Chinese numerals and date words, the
# letters of month names, units and currency codes) plus a few that none does.
ALPHABET = (
    "0123456789" * 3 + " " * 6 + "\n\t.,:-_/#@%‰$¥￥€£+=：　０１９．＄％"
    "年月日号点时分秒半个小钟天周星期工作上下午晚早凌中傍今明元块钱美金人民币港欧英韩万亿千百之"
    "零一二两三四五六七八九十次条字件名位家台张份页轮篇户倍折度℃°公里斤米克字节像素"
    "JanFebMarAprMayJunJulAugSepOctNovDecstndrdthampmAMPMUSDRMBCNYEURHKdollarsyuaneurosbucks"
    "percentpctmssecondsminuteshrsdaysweeksmonthsyearsKMGTiBtokenspxkgvVpythonnoderedisversion"
    "abcdefxyzQZ好的吗"
)


# Whole words and numbers the patterns are built around, so that random strings reach every pattern.
TOKENS = (
    "年", "月", "日", "号", "点", "时", "分", "半", "万", "亿", "元", "块钱", "美元", "个月", "小时", "天", "百分之", "上午", "下午",
    "三", "十", "两", "一二", "Jan", "March", "Sept.", "st", "th", "am", "p.m.", "USD", "US$", "HK$", "RMB ", "dollars",
    "percent", "pct", "ms", "min", "hours", "weeks", "Python ", "version:", "ver.", "v", "V", "ORD-", "TK_", "#", "ABC",
    "deadbeef", "a1b2c3d", "ops@", "example.com", "x.io", "+86 ", "0571-", "13987654321", "timeout=", "k: ", "=",
    "-", "/", ".", ",", ":", " ", "\n", "GB", "tokens", "倍", "km", "°C", "%",
)


def fuzz(seed: int, count: int) -> list[str]:
    """Random strings: characters of ALPHABET, TOKENS and digit runs of 1 to 12, mixed."""
    rng = random.Random(seed)

    def piece() -> str:
        roll = rng.random()
        if roll < 0.4:
            return rng.choice(ALPHABET)
        if roll < 0.7:
            return rng.choice(TOKENS)
        return "".join(rng.choice("0123456789") for _ in range(rng.choice((1, 1, 2, 2, 3, 4, 4, 6, 7, 8, 11, 12))))

    def mutant() -> str:
        # An example that matches, with characters deleted, replaced, inserted or a slice doubled: the edges where a
        # pattern still matches although a character a guard names is gone.
        text = list(rng.choice(_examples()))
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(text) + 1)
            roll = rng.random()
            if roll < 0.35 and at < len(text):
                del text[at]
            elif roll < 0.6 and at < len(text):
                text[at] = rng.choice(ALPHABET)
            elif roll < 0.85:
                text.insert(at, rng.choice((rng.choice(ALPHABET), rng.choice(TOKENS))))
            else:
                text[at:at] = text[max(0, at - 5):at]
        return "".join(text)

    return ["".join(piece() for _ in range(rng.randint(1, 14))) if rng.random() < 0.5 else mutant()
            for _ in range(count)]


def _examples() -> list[str]:
    """The example sentences of the number tests (every pattern matches in some)."""
    if not _EXAMPLES:
        from tests import test_text_numbers

        _EXAMPLES.extend(text for text in _strings_in(Path(test_text_numbers.__file__).read_text(encoding="utf-8"))
                         if text.strip())
        _EXAMPLES.extend(MORE_EXAMPLES)
    return _EXAMPLES


# One match of each pattern the number tests' sentences rarely reach.
MORE_EXAMPLES = [
    "六月三十日前交", "due 3/17/2025 ok", "电话0571-88886666", "卡号6222 0212 3456 7890 1", "2025年的事", "14:30:05 PM",
    "下午三点半", "3点一刻", "5 March, 2026", "Sept. 3rd 2025", "3年经验", "三万块", "十二万", "百分之三点五", "半个月",
    "v1.2.3-rc.1", "10.0.0.1", "node 18.2", "#4521", "AB12345X", "id=abc_12-x9", "k = -3.5", "2 GiB", "1,234,567.89元",
]


_EXAMPLES: list[str] = []


def test_guarded_candidates_equal_the_unguarded_loop_on_the_corpora() -> None:
    texts = corpus()
    assert len(texts) > 2_000  # the corpora were all read
    for text in texts:
        folded = text.translate(FOLD)
        assert _candidates(folded) == _candidates_reference(folded), text


def test_guarded_candidates_equal_the_unguarded_loop_on_random_strings() -> None:
    for text in fuzz(21, 30_000):
        folded = text.translate(FOLD)
        assert _candidates(folded) == _candidates_reference(folded), text


def test_every_pattern_is_reached_by_the_fuzz() -> None:
    # A guard that never lets its pattern run would pass the equality tests only if the pattern never matched.
    matched = {priority for text in fuzz(21, 30_000) for _, _, priority, _ in _candidates(text.translate(FOLD))}
    assert matched == set(range(len(PATTERNS)))


def test_every_pattern_has_a_guard() -> None:
    assert len(number_patterns.NEEDS) == len(PATTERNS)


@pytest.mark.parametrize("text", ["我要在2026年6月30日之前把12万转到对公账户62938471", "ops@example.com 下午三点 百分之十五"])
def test_key_numbers_unchanged(text: str) -> None:
    assert [n.value for n in extract_key_numbers(text)] == [
        text[s:e] for s, e, _ in numbers._select_spans(_candidates_reference(text.translate(FOLD)))]


def test_linear_finders_are_their_patterns_cut_where_the_run_ends() -> None:
    # The finder must stay the pattern it replaces: head + tail spell the pattern (a wrapping group aside).
    for priority, finder in number_patterns.LINEAR.items():
        source = PATTERNS[priority][1].pattern
        assert source in (finder.head.pattern + finder.tail.pattern, f"(?:{finder.head.pattern})" + finder.tail.pattern,
                          f"(?P<k>{finder.head.pattern})" + finder.tail.pattern), priority


# Per linear finder: the characters of its runs and tails, and some that end or break them.
RUN_ALPHABETS = {
    0: "ab_.%+-1@@..x co",
    19: "一二零十百千万亿元块钱美人民币港x",
    20: "一二零十百千万亿次个x",
    26: "一二零十百千半个月小时天周工作日x",
    36: "ab_1=:： .-x9",
}


@pytest.mark.parametrize("priority", sorted(RUN_ALPHABETS))
def test_linear_finders_equal_their_patterns(priority: int) -> None:
    pattern = PATTERNS[priority][1]
    rng = random.Random(priority)
    assert sorted(RUN_ALPHABETS) == sorted(number_patterns.LINEAR)
    for _ in range(20_000):
        text = "".join(rng.choice(RUN_ALPHABETS[priority]) for _ in range(rng.randint(1, 24)))
        expected = [match.span("v") if "v" in pattern.groupindex else match.span() for match in pattern.finditer(text)]
        assert list(number_patterns.pattern_spans(priority, text)) == expected, text


# Long runs whose tail then fails, each passing its pattern's guard: the patterns retried from every character of
# the run ("ab_" * 8,000 + " 1=" took 21 s, "一" * 6,000 + "人" 2.4 s; these took minutes).
ADVERSARIAL = [
    "ab_" * 16_667 + " 1=",  # name=value: a name, then no "=" and a number
    "a" * 25_000 + "@" + "b" * 24_999 + ".",  # e-mail: a domain without a top-level label
    "一" * 49_999 + "人",  # amount: a Chinese number, then not 人民币
    "三" * 49_998 + "万次",  # amount: 万 followed by a counter
    "十二" * 25_000 + "个",  # duration: 个 and no unit
    "一" * 49_999 + "小",  # duration: 小 and no 时
]


@pytest.mark.parametrize("text", ADVERSARIAL, ids=lambda text: repr(text[:6]))
def test_key_numbers_are_linear_on_50000_character_runs(text: str) -> None:
    assert len(text) >= 50_000
    started = time.process_time()
    extract_key_numbers(text)
    # Under 0.1 s here; the quadratic patterns took 10–20 s of CPU on each (minutes of wall time on a loaded box).
    assert time.process_time() - started < 2.0


def test_the_guard_is_linear_on_a_long_input() -> None:
    # The pre-filter reads each text once (a set of its characters): 50,000 characters, no digit, stay fast.
    text = "a" * 25_000 + "月" * 25_000
    started = time.perf_counter()
    number_patterns.char_mask(text)
    assert time.perf_counter() - started < 1.0


def test_values_without_labels_are_the_values_of_the_key_numbers() -> None:
    # key_values skips labelling (write-time dedup asks only which values a text holds): same values, same order.
    texts = corpus() + fuzz(11, 3000)
    assert [key_values(text) for text in texts] == \
        [tuple(number.value for number in extract_key_numbers(text)) for text in texts]
    assert sum(bool(key_values(text)) for text in texts) > len(texts) // 3  # most of them hold values
