"""Check a server's /mcp with the official MCP SDK alone (`pip install 'mcp>=2,<3'`; nothing of this repository).

    python examples/mcp/client.py --url http://127.0.0.1:8000 --key KEY_A [--other-key KEY_B]

Lists the tools, writes a Chinese memory, finds it with memory_retrieve and assemble, checks that another tenant's
key finds nothing, that no key is 401 and that a malformed call is an isError result naming the field. Prints each
step; exits 1 at the first that does not hold.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

FACT = "我的会员卡号是 HZ-20240817，住在杭州西湖区"
QUESTION = "我的会员卡号是多少？"


@asynccontextmanager
async def connect(url: str, key: str) -> AsyncIterator[ClientSession]:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http, \
            streamable_http_client(f"{url}/mcp", http_client=http) as streams, \
            ClientSession(streams[0], streams[1]) as session:
        yield session


def text(result: Any) -> str:
    """Return the text content of a tool result (every tool answers with one text block)."""
    return str(result.content[0].text)


def check(ok: bool, line: str) -> None:
    print(("ok   " if ok else "FAIL ") + line)
    if not ok:
        sys.exit(1)


async def main(url: str, key: str, other_key: str | None) -> None:
    where: dict[str, Any] = {"agent_id": "mcp-check", "session_id": f"s-{uuid.uuid4().hex[:8]}", "user_id": "u-1"}
    async with connect(url, key) as session:
        initialized = await session.initialize()
        check(True, f"initialize: protocol {initialized.protocol_version}, server {initialized.server_info.name}")
        tools = (await session.list_tools()).tools
        check(len(tools) > 0, "tools: " + ", ".join(f"{t.name}({len(t.input_schema.get('properties', {}))})"
                                                   for t in tools))
        written = await session.call_tool("memory_write", {**where, "items": [{"content": FACT, "kind": "identity"}]})
        check(not written.is_error, f"memory_write: {text(written)[:120]}")
        found = await session.call_tool("memory_retrieve", {**where, "query": QUESTION})
        check(FACT in str(found.structured_content), f"memory_retrieve: {text(found)}")
        context = await session.call_tool("assemble", {**where, "user_input": QUESTION, "max_tokens": 300})
        check(FACT in text(context), f"assemble: {text(context)!r}")
        bad = await session.call_tool("memory_write", {**where, "items": [{"contentx": 1}]})
        check(bad.is_error and "items.0.content" in text(bad), f"malformed call: isError, {text(bad)}")
    if other_key:
        async with connect(url, other_key) as other:
            await other.initialize()
            seen = await other.call_tool("memory_retrieve", {**where, "query": QUESTION})
            check(FACT not in str(seen.structured_content), f"another tenant: {text(seen)[:120]}")
    async with httpx2.AsyncClient(timeout=60) as http:
        response = await http.post(f"{url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                                   headers={"Accept": "application/json, text/event-stream"})
        check(response.status_code == 401, f"no key: {response.status_code} {response.json().get('code')}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--key", required=True)
    parser.add_argument("--other-key")
    args = parser.parse_args()
    asyncio.run(main(args.url.rstrip("/"), args.key, args.other_key))
