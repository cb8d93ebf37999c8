# Dify code node (Python 3): compact a message list (a JSON string, e.g. from a conversation variable).
# Input variables:  base_url, api_key, messages_json (String: a JSON list of {role, content}).
# Output variables: working_summary (String), recent_messages_json (String), tokens_before (Number),
#                   tokens_after (Number).
import json

import requests


def main(base_url: str, api_key: str, messages_json: str) -> dict:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    # Stateless: persist false stores nothing; the ids only label the call in the server's logs.
    body = {"agent_id": "dify-code-node", "session_id": "stateless", "messages": messages_json,
            "force": True, "persist": False, "keep_recent": 2}
    response = requests.post(f"{base_url.rstrip('/')}/v1/nodes/compact", json=body, headers=headers,
                             timeout=(3, 12))
    data = response.json()
    if response.status_code != 200 or not data.get("ok"):
        raise RuntimeError(f"compact failed with HTTP {response.status_code}: {data.get('error')}")
    return {"working_summary": data["working_summary"],
            "recent_messages_json": json.dumps(data["recent_messages"], ensure_ascii=False),
            "tokens_before": data["stats"]["tokens_before"], "tokens_after": data["stats"]["tokens_after"]}
