# Dify code node (Python 3): record the turn that just happened (after the Answer node).
# Input variables:  base_url, api_key, agent_id, session_id (← sys.conversation_id), user_id (← sys.user_id),
#                   user_message (← sys.query),
#                   assistant_message (← the LLM node's text) — all String.
# Output variables: version (Number), turn (Number), memories_json (String), compacted (Boolean).
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


def main(base_url: str, api_key: str, agent_id: str, session_id: str, user_message: str,
         assistant_message: str, user_id: str = "") -> dict:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    body = {"agent_id": agent_id, "session_id": session_id, **user_of(user_id),
            "messages": [{"role": "user", "content": user_message},
                         {"role": "assistant", "content": assistant_message}]}
    response = requests.post(f"{base_url.rstrip('/')}/v1/nodes/record_turn", json=body, headers=headers,
                             timeout=(3, 12))
    data = response.json()
    if response.status_code != 200 or not data.get("ok"):
        raise RuntimeError(f"record_turn failed with HTTP {response.status_code}: {data.get('error')}")
    return {"version": data["version"], "turn": data["turn"],
            "memories_json": json.dumps(data["memories"], ensure_ascii=False),
            "compacted": data["compaction"]["compacted"]}
