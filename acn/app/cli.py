"""`acn`: an operator's command line over the HTTP API (works the same for Lite and server deployments).

    acn list   --agent A [--session S] [--kinds fact,decision]
    acn show   MEMORY_ID
    acn export --agent A [--session S] > memories.jsonl      (one memory per line, with history)
    acn import < memories.jsonl                              (exported rows come back exactly: ids, kinds,
                                                              versions, history, timestamps, turn ranges)
    acn import --agent A --session S < items.jsonl           (lines without an id: new items through
                                                              memory_write, so dedup and supersede apply)
    acn delete --agent A [--session S] [--yes] | acn delete MEMORY_ID [--yes]
    acn delete --user U [--agent A] [--yes]                   (forget a user: every row written with the user_id,
                                                              in every conversation of A or of every agent; the
                                                              state of conversations only they wrote in; then
                                                              "remaining: 0" or exit 1)
    acn sessions --agent A --session S                        (the session's versions)
    acn keygen [--tenant T]                                   (a new random API key; with --tenant, the
                                                              key:tenant entry for ACN_API_KEYS)

--url (ACN_URL, default http://127.0.0.1:8000) and --key (ACN_KEY) pick the server. Counts and progress go to
stderr (progress only when stderr is a terminal). delete asks first; without a terminal it needs --yes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import sys
from collections.abc import Iterator
from typing import Any, NoReturn

import requests

from acn.common.models import IDENTIFIER_PATTERN

BATCH = 100
# memory_write's actions, as an import reports them.
WRITE_OUTCOME = {"added": "created", "updated": "updated", "superseded": "updated", "duplicate": "unchanged"}


def fail(message: str) -> NoReturn:
    """Stop with a one-line message (exit status 1), never a traceback."""
    raise SystemExit(f"acn: {message}")


class Client:
    """The few calls the commands need; every error envelope becomes a one-line message."""

    def __init__(self, url: str, key: str) -> None:
        self.url = url.rstrip("/")
        self.session = requests.Session()
        if key:
            self.session.headers["Authorization"] = f"Bearer {key}"

    def call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        try:
            response = self.session.request(method, f"{self.url}{path}", timeout=120, **kwargs)
        except requests.ConnectionError as error:
            reason = "connection refused" if "refused" in str(error).lower() else "cannot connect"
            fail(f"cannot reach the server at {self.url} ({reason}); is it running (`make run`)? "
                 "Pick another with --url or ACN_URL.")
        except requests.Timeout:
            fail(f"the server at {self.url} did not answer within 120 s")
        except requests.RequestException as error:
            fail(f"request to {self.url} failed: {error}")
        try:
            body = response.json()
        except ValueError:
            fail(f"{response.status_code} from {self.url}{path} is not this server's JSON (is --url right?)")
        if not isinstance(body, dict) or not body.get("ok"):
            body = body if isinstance(body, dict) else {}
            fail(f"{response.status_code} {body.get('code')}: {body.get('error')}")
        return dict(body)

    def pages(self, params: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Yield every memory of a namespace, page by page."""
        offset: int | None = 0
        while offset is not None:
            page = self.call("GET", "/v1/memories", params={**params, "limit": 1000, "offset": offset})
            yield from page["memories"]
            offset = page["next_offset"]


def progress(done: int, label: str) -> None:
    """Rewrite one status line on a terminal; print nothing when stderr is a file or a pipe."""
    if sys.stderr.isatty():
        print(f"\r{label}: {done}", end="", file=sys.stderr, flush=True)


def report(text: str) -> None:
    """Print a final count (ending the progress line on a terminal)."""
    print(("\r" if sys.stderr.isatty() else "") + text, file=sys.stderr)


def confirm(question: str, args: argparse.Namespace) -> None:
    """Ask before a destructive command unless --yes; without a terminal to ask on, refuse."""
    if args.yes:
        return
    if not sys.stdin.isatty():
        fail(f"{question}: refusing without a terminal to ask on; add --yes")
    try:
        answer = input(f"{question}? [y/N] ")
    except EOFError:
        answer = ""
    if answer.strip().lower() not in ("y", "yes"):
        fail("cancelled")


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
    report(f"exported: {count}")


def cmd_import(client: Client, args: argparse.Namespace) -> None:
    if sys.stdin.isatty():
        usage("import reads JSON lines from stdin: acn import < memories.jsonl")
    rows, items = read_import(sys.stdin)
    if items and not (args.agent and args.session):
        fail("lines without an id are new items: give --agent and --session to write them into")
    counts = {"created": 0, "updated": 0, "unchanged": 0}
    done = 0
    for start in range(0, len(rows), BATCH):
        body = client.call("POST", "/v1/memories/import", json={"memories": rows[start:start + BATCH]})
        for name in counts:
            counts[name] += int(body[name])
        done += len(rows[start:start + BATCH])
        progress(done, f"imported (of {len(rows) + len(items)})")
    for start in range(0, len(items), BATCH):
        body = client.call("POST", "/v1/nodes/memory_write",
                           json={**namespace(args), "items": items[start:start + BATCH]})
        for result in body["results"]:
            counts[WRITE_OUTCOME.get(result["action"], "updated")] += 1
        done += len(items[start:start + BATCH])
        progress(done, f"imported (of {len(rows) + len(items)})")
    report(", ".join(f"{name}: {count}" for name, count in counts.items()))


def read_import(lines: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Split JSON lines into exported rows (with an id: restored as they are) and new memory_write items."""
    rows: list[dict[str, Any]] = []
    items: list[dict[str, Any]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError as error:
            fail(f"line {number} is not JSON: {error}")
        if not isinstance(value, dict):
            fail(f"line {number} is not a JSON object")
        (rows if "id" in value else items).append(value)
    return rows, items


def cmd_delete(client: Client, args: argparse.Namespace) -> None:
    if args.target:
        memory = client.call("GET", f"/v1/memories/{args.target}")["memory"]
        confirm(f"delete memory {args.target} ({memory['kind']}: {memory['content'][:60]!r})", args)
        client.call("DELETE", f"/v1/memories/{args.target}")
        report("deleted: 1")
        return
    if not args.agent and not args.user:
        usage("delete needs a MEMORY_ID, --agent or --user")
    if args.user and not args.session:
        forget_user(client, args)
        return
    where = ", ".join(f"{name} {value}" for name, value in namespace(args).items())
    count = sum(1 for _ in client.pages(namespace(args)))
    confirm(f"delete all {count} memories of {where}" + ("" if args.user else " and its session state"), args)
    report(f"deleted: {client.call('DELETE', '/v1/memories', params=namespace(args))['deleted']}")


def forget_user(client: Client, args: argparse.Namespace) -> None:
    """Delete a user's memories in every conversation (of --agent, or of every agent), then say what is left."""
    where = f"agent {args.agent}" if args.agent else "every agent"
    confirm(f"forget user {args.user}: delete every memory written with that user_id in every conversation of "
            f"{where}, and the state of conversations only they wrote in", args)
    body = client.call("DELETE", "/v1/memories", params=namespace(args))
    report(f"deleted: {body['deleted']}, conversations deleted: {body['sessions_deleted']}, "
           f"remaining: {body['remaining']}")
    if body["remaining"]:
        fail(f"{body['remaining']} rows of user {args.user} are still stored")


def cmd_sessions(client: Client, args: argparse.Namespace) -> None:
    body = client.call("POST", "/v1/nodes/session_versions", json=namespace(args))
    for version in body["versions"]:
        print(f"v{version['version']}\t{version['reason']}\tturn {version['turn']}\t"
              f"{version['segments']} segments\t{version['buffer_messages']} buffered")


def cmd_keygen(_client: Client, args: argparse.Namespace) -> None:
    print(new_api_key() + (f":{args.tenant}" if args.tenant else ""))


def new_api_key() -> str:
    """Return a new API key: 256 random bits, URL-safe (no ':' or ',' that ACN_API_KEYS splits on)."""
    return "acn_" + secrets.token_urlsafe(32)


COMMANDS = {"keygen": cmd_keygen, "list": cmd_list, "show": cmd_show, "export": cmd_export, "import": cmd_import,
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
    root.add_argument("--tenant", help="the tenant a new key signs in as (keygen)")
    root.add_argument("--kinds", help="comma-separated kinds (list)")
    root.add_argument("--yes", "-y", action="store_true", help="delete without asking")
    return root


def usage(message: str) -> NoReturn:
    """Stop with argparse's usage line and exit status 2, as for any other malformed command line."""
    parser().error(message)


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if args.command in ("list", "export", "sessions") and not args.agent:
        usage(f"{args.command} needs --agent")
    if args.command == "show" and not args.target:
        usage("show needs a MEMORY_ID")
    if args.tenant and (args.command != "keygen" or not re.fullmatch(IDENTIFIER_PATTERN, args.tenant)):
        usage("--tenant is for keygen, and must be an identifier (letters, digits, _.:@-)")
    if args.target and args.command not in ("show", "delete"):
        usage(f"{args.command} takes no MEMORY_ID")
    COMMANDS[args.command](Client(args.url, args.key), args)


if __name__ == "__main__":
    main()
