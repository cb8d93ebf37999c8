# Dify code node (Python 3): record the turn that just happened (after the Answer node).
# Input variables:  base_url, api_key, agent_id, session_id (← sys.conversation_id), user_message (← sys.query),
#                   assistant_message (← the LLM node's text) — all String.
# Output variables: version (Number), turn (Number), memories_json (String), compacted (Boolean).
import json

import requests


def main(base_url: str, api_key: str, agent_id: str, session_id: str, user_message: str,
         assistant_message: str) -> dict:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    body = {"agent_id": agent_id, "session_id": session_id,
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
