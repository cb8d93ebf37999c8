"""Content terms for re-ranking: stemmed English words and jieba Chinese words, without stop words.

The store's BM25 analyzer (jieba, lower case) does not stem: "research" does not find "researching". A light
suffix stemmer on both sides lets the re-ranker see those matches. Numbers, dates and IDs stay whole.
"""

from __future__ import annotations

import re

from acn.text.byte_cache import ENTRY_BYTES, TEXT_CACHE, items_bytes, text_bytes

_WORD = re.compile(r"[a-z0-9][a-z0-9'_-]*")
_CJK = re.compile(r"[\u4e00-\u9fff]")
_CJK_RUN = re.compile(r"[\u4e00-\u9fff]+")
STOP_EN = frozenset("""
a about above after again against all am an and any are aren't as at be because been before being below between
both but by can could did didn't do does doesn't doing don't down during each few for from further had has have
having he her here hers herself him himself his how i if in into is isn't it it's its itself just let's me more
most my myself no nor not now of off on once only or other our ours ourselves out over own same she should so
some such than that that's the their theirs them themselves then there these they this those through to too
under until up very was wasn't we were what what's when where which while who whom why will with would you your
yours yourself yourselves also ever still really yeah yes oh hey hi thanks thank like get got go going much many
one something thing things kind lot sure well way know think tell told said say says
""".split())
STOP_ZH = frozenset("的 了 是 我 你 他 她 它 们 在 有 和 就 都 也 还 要 吗 呢 吧 啊 呀 么 什么 多少 "
                    "哪 哪个 怎么 这 那 这个 那个 一个 之前 以前 刚才 现在 来着 一下 请 帮 给 把 被 "
                    "说 过 会 能 可以".split())
_SUFFIXES = ("ational", "ization", "fulness", "ousness", "iveness", "ements", "ement", "ments", "ment", "ness",
             "ings", "ing", "edly", "ied", "ies", "ed", "ers", "er", "ly", "es", "s")


@TEXT_CACHE.cached(text_bytes)
def stem(word: str) -> str:
    """Return a crude stem: the longest known suffix removed while at least three letters remain."""
    if not word.isalpha() or len(word) <= 3:
        return word
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            base = word[: -len(suffix)]
            if suffix in ("ied", "ies"):
                return base + "y"
            if len(base) > 3 and base[-1] == base[-2] and base[-1] not in "lsz":  # running -> run
                return base[:-1]
            return base.rstrip("e") if len(base) > 4 else base
    return word.rstrip("e") if len(word) > 4 else word


def content_terms(text: str) -> list[str]:
    """Return the content terms of a text: stemmed English words and Chinese words, no stop words."""
    return list(_content_terms(text))


# Retrieval re-scores the same stored memories on every query; segmenting them again is most of its cost.
@TEXT_CACHE.cached(items_bytes)
def _content_terms(text: str) -> tuple[str, ...]:
    return _segmented_terms(text)


def _segmented_terms(text: str) -> tuple[str, ...]:
    lowered = text.lower()
    terms = [stem(w.strip("'_-")) for w in _WORD.findall(lowered) if w not in STOP_EN]
    if _CJK.search(lowered):
        terms += [w for run in _CJK_RUN.findall(lowered) for w in _run_words(run) if w not in STOP_ZH]
    return tuple(t for t in terms if t)


def _run_words(run: str) -> tuple[str, ...]:
    """Return jieba's words of one run of Chinese characters, a short run's kept in the text cache.

    A stored text is segmented when a read first meets its row, and rows whose texts differ only in their numbers
    share their runs ("我的订单号", "上次说的金额是"): at turn 3,000 of bench.long_session's chat a focused assemble
    meets ~25 rows it has not read before, and segmenting each whole was its largest cost after the searches (issue
    47). jieba segments a run the same whatever surrounds it, so the words are those of the run segmented again.
    """
    return _run_words_cached(run) if len(run) <= CACHED_BLOCK_CHARS else _jieba_words(run)


def _jieba_words(run: str) -> tuple[str, ...]:
    import jieba

    return tuple(w for w in jieba.cut_for_search(run) if w.strip())


def content_term_set(text: str) -> frozenset[str]:
    """Return the distinct content terms of a text (see content_terms)."""
    return _content_term_set(text)


@TEXT_CACHE.cached(items_bytes)
def _content_term_set(text: str) -> frozenset[str]:
    # A stored text's set is all the re-ranker reads of it (hybrid_rank.memory_terms): its tuple is not kept beside it
    # unless kept already, so a text takes one entry, and a start-up pass segments twice the texts within its share
    # of the cache (issue 47: a namespace of 8.4k texts, ~2.4 KB each with both, did not fit in 16 MB).
    return frozenset(_content_terms(text) if _content_terms.holds(text) else _segmented_terms(text))


def segmented(text: str) -> int:
    """Compute and keep a text's content term set (content_term_set, what re-ranking reads of a stored text) unless
    kept already; return about the bytes that added to the text cache (0 when it was kept): the set's entry and the
    entries of the short Chinese runs it segmented that no text had before (_run_words), so that a start-up pass
    within its share of the cache stays there."""
    if _content_term_set.holds(text):
        return 0
    runs = {run for run in _CJK_RUN.findall(text.lower()) if len(run) <= CACHED_BLOCK_CHARS}
    new_runs = [run for run in runs if not _run_words_cached.holds(run)]
    terms = content_term_set(text)
    return ENTRY_BYTES + text_bytes(text) + items_bytes(terms) + sum(
        ENTRY_BYTES + text_bytes(run) + items_bytes(_run_words_cached(run)) for run in new_runs)


_INFLECTIONS = ("", "s", "ed", "ing", "er")


def expand_query(query: str) -> str:
    """Return the query with the inflections of its English content words added, for a non-stemming BM25.

    "What did Bob adopt?" also searches adopts, adopted, adopting, adopter: an analyzer without a stemmer
    would otherwise miss "I adopted a cat".
    """
    # Capitalised words are names: "Melanie" has no inflections worth searching for.
    words = [w.lower() for w in re.findall(r"[A-Za-z]{4,}", query) if not w[0].isupper() and w.lower() not in STOP_EN]
    extra = {stem(w) + suffix for w in words for suffix in _INFLECTIONS} - set(words)
    return f"{query} {' '.join(sorted(extra))}" if extra else query


# Texts up to this long keep their BM25 tokens (queries, chat lines); longer ones (tool output) keep the tokens of
# their blocks instead, below.
CACHED_TOKENS_CHARS = 2000
# jieba segments each run of word characters (its re_han_default blocks) on its own, so a text's tokens are
# its blocks' tokens in order. Tool output repeats its blocks (JSON keys, statuses, field names) from one call to
# the next: a 3 KB order-tracking result takes 4.6 ms from jieba and 1.4 ms with its blocks' tokens kept. Longer
# blocks rarely recur and are segmented each time.
CACHED_BLOCK_CHARS = 64


def bm25_tokens(text: str) -> tuple[str, ...]:
    """Return the tokens the store's BM25 analyzer makes of a text (jieba search mode, HMM, lower case).

    Measured on Milvus Lite 3.2.2 with milvus_setup.ANALYZER: punctuation tokens ("-", "#", "'") are kept
    and a query's repeated tokens count once each time they occur; only whitespace is dropped. The in-process
    index (acn/storage/database/lite/local_index.py) ranks with these tokens, so it must keep in step with that
    analyzer.
    """
    return _bm25_tokens_cached(text) if len(text) <= CACHED_TOKENS_CHARS else _bm25_tokens(text)


def _bm25_tokens(text: str) -> tuple[str, ...]:
    """jieba.cut_for_search(text, HMM=True), lower case, whitespace dropped, one block at a time.

    As jieba.Tokenizer.cut does: a block of word characters is segmented (and cut_for_search adds the
    dictionary's 2- and 3-grams of each long word, within that word); between blocks every character is its own
    token, and whitespace ones are dropped here. tests/test_text_terms.py holds this to jieba on random text.
    """
    import jieba

    blocks = jieba.re_han_default.split(text)
    tokens: list[str] = []
    for index, block in enumerate(blocks):
        if index % 2:  # split() with one capturing group: odd items are the blocks, even ones what lies between
            tokens += _block_tokens_cached(block) if len(block) <= CACHED_BLOCK_CHARS else _block_tokens(block)
        else:
            tokens += [char.lower() for char in block if not char.isspace()]
    return tuple(tokens)


def _block_tokens(block: str) -> tuple[str, ...]:
    import jieba

    return tuple(w.lower() for w in jieba.cut_for_search(block, HMM=True))


_block_tokens_cached = TEXT_CACHE.cached(items_bytes)(_block_tokens)
_run_words_cached = TEXT_CACHE.cached(items_bytes)(_jieba_words)
_bm25_tokens_cached = TEXT_CACHE.cached(items_bytes)(_bm25_tokens)
