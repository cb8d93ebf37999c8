# Coze code node (Python): assemble the context for this turn from the Agent Context Nodes server.
# Declare inputs: base_url (String), api_key (String), agent_id (String), session_id (String),
#                 user_input (String), system_prompt (String), max_tokens (Integer, optional),
#                 user_id (String, optional: the end user, so what they said of themselves follows them into their
#                 next conversations; an identifier, ^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$).
# Declare outputs: system_text (String), prompt (String), memory_text (String), messages_json (String),
#                  total_tokens (Integer).
# Coze runs `main` with `args.params` holding the inputs; `Args` and `Output` are defined by the runner.
# Prefer the plugin import or an HTTP request node (integrations/coze/README.md). Runners differ: the
# sandbox runner reaches only the hosts in CODE_RUNNER_ALLOW_NET (default cdn.jsdelivr.net: the operator must add
# the server's domain); coze-studio's "direct"/local runner has httpx but, since its import restrictions
# (GHSA-pfc8-gmgc-5pwq), blocks the ssl/socket/http modules every HTTP client needs.
import json

import httpx


async def main(args: Args) -> Output:  # noqa: F821 - Args and Output come from the Coze runner
    params = args.params
    base_url = str(params["base_url"]).rstrip("/")
    headers = {"Content-Type": "application/json"}
    if params.get("api_key"):
        headers["Authorization"] = f"Bearer {params['api_key']}"
    body = {"agent_id": params["agent_id"], "session_id": params["session_id"],
            "user_input": params.get("user_input") or "", "system_prompt": params.get("system_prompt") or "",
            "max_tokens": int(params.get("max_tokens") or 4000)}
    if params.get("user_id"):
        body["user_id"] = str(params["user_id"])
    async with httpx.AsyncClient(timeout=httpx.Timeout(30.0, connect=10.0)) as client:
        response = await client.post(f"{base_url}/v1/nodes/assemble", json=body, headers=headers)
    data = response.json()
    if response.status_code != 200 or not data.get("ok"):
        raise Exception(f"assemble failed with HTTP {response.status_code}: {data.get('error', response.text[:300])}")
    ret: Output = {  # noqa: F821
        "system_text": data["system_text"],
        "prompt": data["prompt"],
        "memory_text": data["memory_text"],
        "messages_json": json.dumps(data["messages"], ensure_ascii=False),
        "total_tokens": data["tokens"]["total"],
    }
    return ret
