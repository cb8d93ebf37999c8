"""The read cache's sizes and pacing, named in one place (read_cache.py, index_loads.py)."""

from __future__ import annotations

from acn.storage.database.base import Filter

# The caches, named and sized in one place. Session archives: at most CACHED_ARCHIVES sessions and about
# CACHED_ARCHIVE_ROWS archived messages in all (the most recently used sessions stay).
CACHED_ARCHIVES = 256
CACHED_ARCHIVE_ROWS = 200_000
CACHED_VIEWS = 1024
CACHED_AGENT_VIEWS = 256  # views of what an agent's namespace reads (agent_view), least recently used out first
CACHED_POOLS = 64
# Sessions whose readable rows are searched in memory: at most this many (and about as many rows in all as the
# repository is given). A session that can read more rows than the store's query window is searched in the store.
CACHED_INDEXES = 256
CACHED_INDEX_ROWS = 200_000  # the default of ACN_LOCAL_INDEX_ROWS: one namespace of 200k rows fits (~1 KB a row)
# A batch of this many rows for one session (an import, a seeded store) starts loading its index at once: see
# ReadCache.after_save. Smaller writes (a turn, a few memories) leave it to the session's first read, as before.
WARM_ON_WRITE = 100
# The default of ACN_READ_CACHE_MB. A session of 1,000 number-rich turns with the default embedder takes 13.1 MB
# (3,645 rows of 512 floats; 22.5 MB while its vectors were held twice): 256 MB held 11 (19 now), and 32 such chats
# served in turn each loaded its session again every turn, 17x slower (bench.sessions_in_turn, issue 47). 768 MB
# holds ~55.
CACHED_BYTES = 768 << 20
TOKENIZE_CHUNK = 200  # rows a loading index tokenizes between pauses
LOAD_PAGE = 2000  # a session index reads up to this many rows in one query, more in id ranges (ID_CUTS)
# One sixteenth of the ids of memories and of archived messages (both hex, evenly spread). A session whose rows
# fill LOAD_PAGE is first sampled there: more than a sixteenth of a query window in the slice, and the whole would
# not fit one either. Lite builds every row a query returns in Python (~50 us a row): at 100k memories in one
# namespace, reading ranges until the window overflowed took ~1.5 s, the sample ~0.3 s.
SAMPLE = Filter('(id >= "mem_0" and id < "mem_1") or (id >= "turn_0" and id < "turn_1")')
SAMPLE_SHARE = 16
# A session index loaded by id on the request's thread up to this many rows; a larger one (up to the repository's
# index_rows, and within its byte budget) loads by id on a background thread, tokenized there before it serves: the
# start-up warmer's (acn/app/warmer.py), or the loader's after a large write or a first read. Until then the store
# answers its reads (correct, slower): a request does not wait for a load of seconds (100k rows: ~2 s of lookups and
# ~20 s of tokenizing), except for the start-up warmer's, which /readyz reports (see local_index).
LISTED_LOAD_ROWS = 20_000
ID_LOOKUP = 500  # ids in one primary-key lookup (9 ms on Lite at 200k rows)
CACHED_AGENT_SESSIONS = 1024  # agents whose sessions with rows are known (see ReadCache._agent_sessions)
PREWARM_WAIT = 30.0  # seconds a request waits at most for the start-up warmer's load of its session index
CACHED_WRITE_COUNTERS = 65_536  # write counters kept (agents, users, sessions: see ReadCache.after_save)
# A session's first search while this process has not searched the store: it waits for the load of the session's
# index under way (the start-up warmer's) unless the store would answer sooner. Lite's first search builds its search
# structures over every row of the collection (~25-35 us a row here); a load reads the session's rows one by one
# (~120 us a row BM25 only, ~250-300 with USE). Measured (USE, after a restart, asked as soon as /healthz answered): a
# store of one 10k-row session answered by the store in 0.36-0.38 s against 2.8-3.5 s waiting for the load; a store of
# 50 sessions of 1k rows in 1.2-1.5 s (+70 MB of RSS) against 0.21-0.29 s. The store answers when it holds fewer
# than this many rows a row of the session (HeldIndexes.store_sooner; a store's rows are counted as Lite numbers its
# writes, never fewer than it holds).
STORE_ROWS_PER_LOADED_ROW = 4
