"""`acn`: an operator's command line over the HTTP API (works the same for Lite and server deployments).

    acn list   --agent A [--session S] [--kinds fact,decision]
    acn show   MEMORY_ID
    acn export --agent A [--session S] > memories.jsonl      (one memory per line, with history)
    acn import --agent A --session S < memories.jsonl        (through memory_write: dedup and supersede apply)
    acn delete --agent A [--session S | --user U] | acn delete MEMORY_ID
    acn sessions --agent A --session S                        (the session's versions)

--url (ACN_URL, default http://127.0.0.1:8000) and --key (ACN_KEY) pick the server; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from typing import Any

import requests

BATCH = 100


class Client:
    """The few calls the commands need; every error envelope becomes a one-line message."""

    def __init__(self, url: str, key: str) -> None:
        self.url = url.rstrip("/")
        self.session = requests.Session()
        if key:
            self.session.headers["Authorization"] = f"Bearer {key}"

    def call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        response = self.session.request(method, f"{self.url}{path}", timeout=120, **kwargs)
        body = response.json()
        if not body.get("ok"):
            raise SystemExit(f"acn: {response.status_code} {body.get('code')}: {body.get('error')}")
        return dict(body)

    def pages(self, params: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Yield every memory of a namespace, page by page."""
        offset: int | None = 0
        while offset is not None:
            page = self.call("GET", "/v1/memories", params={**params, "limit": 1000, "offset": offset})
            yield from page["memories"]
            offset = page["next_offset"]


def progress(done: int, label: str) -> None:
    print(f"\r{label}: {done}", end="", file=sys.stderr, flush=True)


def namespace(args: argparse.Namespace) -> dict[str, Any]:
    values = {"agent_id": args.agent, "session_id": args.session, "user_id": getattr(args, "user", None)}
    return {k: v for k, v in values.items() if v}


def cmd_list(client: Client, args: argparse.Namespace) -> None:
    params = {**namespace(args), **({"kinds": args.kinds} if args.kinds else {})}
    for memory in client.pages(params):
        tag = f"v{memory['version']}" + (" superseded" if memory["valid_to"] else "")
        print(f"{memory['id']}\t{memory['kind']}\t{tag}\t{memory['content'][:80]}")


def cmd_show(client: Client, args: argparse.Namespace) -> None:
    print(json.dumps(client.call("GET", f"/v1/memories/{args.target}")["memory"], ensure_ascii=False, indent=2))


def cmd_export(client: Client, args: argparse.Namespace) -> None:
    count = 0
    for count, memory in enumerate(client.pages(namespace(args)), start=1):
        print(json.dumps(memory, ensure_ascii=False))
        progress(count, "exported")
    print(f"\rexported: {count}", file=sys.stderr)


def cmd_import(client: Client, args: argparse.Namespace) -> None:
    items = [import_item(json.loads(line)) for line in sys.stdin if line.strip()]
    written = 0
    for start in range(0, len(items), BATCH):
        batch = items[start:start + BATCH]
        client.call("POST", "/v1/nodes/memory_write", json={**namespace(args), "items": batch})
        written += len(batch)
        progress(written, f"imported (of {len(items)})")
    print(f"\rimported: {written}", file=sys.stderr)


def import_item(memory: dict[str, Any]) -> dict[str, Any]:
    """Return the memory_write item of an exported memory (archived turns import as facts)."""
    item = {k: memory[k] for k in ("kind", "content", "key", "importance", "scope", "meta", "turn_range")
            if memory.get(k) is not None}
    if item.get("kind") == "turn":
        item["kind"] = "fact"
    return item


def cmd_delete(client: Client, args: argparse.Namespace) -> None:
    if args.target:
        client.call("DELETE", f"/v1/memories/{args.target}")
        print("deleted: 1", file=sys.stderr)
        return
    if not args.agent:
        raise SystemExit("acn: delete needs a MEMORY_ID or --agent")
    print(f"deleted: {client.call('DELETE', '/v1/memories', params=namespace(args))['deleted']}", file=sys.stderr)


def cmd_sessions(client: Client, args: argparse.Namespace) -> None:
    body = client.call("POST", "/v1/nodes/session_versions", json=namespace(args))
    for version in body["versions"]:
        print(f"v{version['version']}\t{version['reason']}\tturn {version['turn']}\t"
              f"{version['segments']} segments\t{version['buffer_messages']} buffered")


COMMANDS = {"list": cmd_list, "show": cmd_show, "export": cmd_export, "import": cmd_import,
            "delete": cmd_delete, "sessions": cmd_sessions}


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="acn", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    root.add_argument("--url", default=os.environ.get("ACN_URL", "http://127.0.0.1:8000"))
    root.add_argument("--key", default=os.environ.get("ACN_KEY", ""))
    root.add_argument("command", choices=sorted(COMMANDS))
    root.add_argument("target", nargs="?", help="a memory id (show, delete)")
    root.add_argument("--agent")
    root.add_argument("--session")
    root.add_argument("--user")
    root.add_argument("--kinds", help="comma-separated kinds (list)")
    return root


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if args.command in ("list", "export", "import", "sessions") and not args.agent:
        raise SystemExit(f"acn: {args.command} needs --agent")
    COMMANDS[args.command](Client(args.url, args.key), args)


if __name__ == "__main__":
    main()
