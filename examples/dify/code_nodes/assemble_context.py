# Dify code node (Python 3): assemble this turn's context on the Agent Context Nodes server.
# Input variables:  base_url, api_key, agent_id, session_id (← sys.conversation_id), user_id (← sys.user_id),
#                   user_input (← sys.query),
#                   system_prompt — all String.
# Output variables: system_text (String), prompt (String), memory_text (String), messages_json (String),
#                   total_tokens (Number).
# The sandbox kills a run after 15 s and caps arrays of objects at 30 items: calls time out well before, and
# the message list leaves as one JSON string. Outbound calls pass Dify's SSRF proxy (see docs/DEPLOYMENT.md).
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


def main(base_url: str, api_key: str, agent_id: str, session_id: str, user_input: str,
         system_prompt: str, user_id: str = "") -> dict:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    body = {"agent_id": agent_id, "session_id": session_id, **user_of(user_id), "user_input": user_input,
            "system_prompt": system_prompt, "max_tokens": 6000}
    response = requests.post(f"{base_url.rstrip('/')}/v1/nodes/assemble", json=body, headers=headers,
                             timeout=(3, 10))
    data = response.json()
    if response.status_code != 200 or not data.get("ok"):
        raise RuntimeError(f"assemble failed with HTTP {response.status_code}: {data.get('error')}")
    return {"system_text": data["system_text"], "prompt": data["prompt"], "memory_text": data["memory_text"],
            "messages_json": json.dumps(data["messages"], ensure_ascii=False),
            "total_tokens": data["tokens"]["total"]}
