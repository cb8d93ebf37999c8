# Dify code node (Python 3): fetch the memories relevant to the user's message, as tagged text.
# Input variables:  base_url, api_key, agent_id, session_id (← sys.conversation_id), user_id (← sys.user_id),
#                   query (← sys.query) — String.
# Output variables: text (String), count (Number), memories_json (String).
import hashlib
import json
import re

import requests

IDENTIFIER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$")


def user_of(user_id: str) -> dict:
    """Return {"user_id": …} for Dify's sys.user_id (what the user said of themselves follows them into their next
    conversations), {} without one; an id outside the server's alphabet is hashed."""
    value = (user_id or "").strip()
    if not value:
        return {}
    return {"user_id": value if IDENTIFIER.match(value) else "u-" + hashlib.sha256(value.encode()).hexdigest()[:24]}


def main(base_url: str, api_key: str, agent_id: str, session_id: str, query: str, user_id: str = "") -> dict:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    body = {"agent_id": agent_id, "session_id": session_id, **user_of(user_id), "query": query, "top_k": 3}
    response = requests.post(f"{base_url.rstrip('/')}/v1/nodes/memory_retrieve", json=body, headers=headers,
                             timeout=(3, 10))
    data = response.json()
    if response.status_code != 200 or not data.get("ok"):
        raise RuntimeError(f"memory_retrieve failed with HTTP {response.status_code}: {data.get('error')}")
    memories = [{"kind": m["kind"], "content": m["content"], "score": m["score"]} for m in data["memories"]]
    return {"text": data["text"], "count": len(memories),
            "memories_json": json.dumps(memories, ensure_ascii=False)}
