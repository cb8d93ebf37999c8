"""The container build: what `.dockerignore` lets into the image's build context, and the compose file's wiring.

`context_files` applies .dockerignore as Docker does (moby/patternmatcher): patterns are paths relative to the
context root, `*` and `?` stay within one path segment, `**` spans any number of them, a pattern that matches a
folder excludes everything under it, and a later `!pattern` re-includes what an earlier one excluded.
"""

from __future__ import annotations

import os
import re
import tomllib

import yaml

from tests.conftest import ROOT

DOCKERIGNORE = ROOT / ".dockerignore"
COMPOSE = ROOT / "deploy" / "docker-compose.yml"
DIFY_COMPOSE = ROOT / "deploy" / "docker-compose.dify.yml"
# What a user's checkout holds after `make run` / `make test` besides the tracked files.
ARTEFACTS = [".venv/bin/python", ".venv312/lib/site.py", ".git/HEAD", "data/memory.db", "data/memory.db/wal/0",
             "tests/__pycache__/conftest.cpython-311.pyc", "common/__pycache__/cli.cpython-311.pyc",
             ".pytest_cache/v/cache/lastfailed", ".hypothesis/examples/x", "agent_context_nodes.egg-info/PKG-INFO",
             "build/lib/server.py", "dist/agent_context_nodes-0.1.0.difypkg", "deploy/volumes/milvus/x",
             "deploy/.env", "schemathesis-report/junit.xml", ".schemathesis/x", "bench/results/run.json"]


def rules() -> list[tuple[bool, re.Pattern[str]]]:
    """Return (exclude?, regex) per .dockerignore line."""
    result = []
    for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = os.path.normpath(line.lstrip("!").strip().lstrip("/"))
        result.append((not negate, re.compile(to_regex(pattern))))
    return result


def to_regex(pattern: str) -> str:
    parts = []
    index = 0
    while index < len(pattern):
        if pattern.startswith("**/", index):
            parts.append("(?:.*/)?")
            index += 3
        elif pattern.startswith("**", index):
            parts.append(".*")
            index += 2
        elif pattern[index] == "*":
            parts.append("[^/]*")
            index += 1
        elif pattern[index] == "?":
            parts.append("[^/]")
            index += 1
        else:
            parts.append(re.escape(pattern[index]))
            index += 1
    return "^" + "".join(parts) + "$"


def excluded(path: str, compiled: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """True when the path (or a folder above it) is excluded by the last matching rule."""
    prefixes = ["/".join(path.split("/")[:n]) for n in range(1, path.count("/") + 2)]
    state = False
    for exclude, regex in compiled:
        if any(regex.match(prefix) for prefix in prefixes):
            state = exclude
    return state


def tree() -> list[str]:
    """Every file of the working tree (not following symlinks: .venv may be one)."""
    files = []
    for folder, dirs, names in os.walk(ROOT, followlinks=False):
        relative = os.path.relpath(folder, ROOT)
        for name in names + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            files.append(os.path.normpath(os.path.join(relative, name)))
    return files


def test_the_build_context_excludes_environments_history_and_data() -> None:
    compiled = rules()
    leaked = [path for path in ARTEFACTS if not excluded(path, compiled)]
    assert leaked == []
    in_context = [path for path in tree() if not excluded(path, compiled)]
    assert in_context, "the context cannot be empty"
    for path in in_context:
        top = path.split("/")[0]
        assert top not in {".git", ".venv", ".venv312", "data", "tests", ".pytest_cache"}, path
        assert "__pycache__" not in path and not path.endswith((".pyc", ".db")), path


def test_the_build_context_holds_everything_the_image_installs_and_runs() -> None:
    compiled = rules()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    needed = ["pyproject.toml", "README.md", "server.py", "deploy/gunicorn.conf.py", "deploy/Dockerfile"]
    assert project["tool"]["setuptools"]["packages"]["find"]["include"] == ["acn", "acn.*"]
    needed += [str(p.relative_to(ROOT)) for p in (ROOT / "acn").rglob("*")
               if p.is_file() and p.suffix != ".pyc" and "__pycache__" not in p.parts]
    missing = [path for path in needed if excluded(path, compiled)]
    assert missing == []


def test_the_dockerignore_model_follows_docker_rules() -> None:
    compiled = [(True, re.compile(to_regex("**/*.pyc"))), (True, re.compile(to_regex("data"))),
                (False, re.compile(to_regex("data/keep.txt")))]
    assert excluded("a/b/c.pyc", compiled) and excluded("c.pyc", compiled)
    assert excluded("data/memory.db", compiled) and not excluded("data/keep.txt", compiled)
    assert not excluded("database.py", compiled)


def test_compose_waits_for_healthy_services_and_checks_the_server() -> None:
    services = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))["services"]
    for name, service in services.items():
        assert "healthcheck" in service, f"{name} has no healthcheck"
    server = services["agent-context-nodes"]
    assert server["depends_on"] == {"milvus-standalone": {"condition": "service_healthy"},
                                    "redis": {"condition": "service_healthy"}}  # the replicas' session leases
    assert services["proxy"]["depends_on"] == {"agent-context-nodes": {"condition": "service_healthy"}}
    assert services["milvus-standalone"]["depends_on"] == {"etcd": {"condition": "service_healthy"},
                                                           "minio": {"condition": "service_healthy"}}
    assert "/healthz" in " ".join(server["healthcheck"]["test"])
    assert "ACN_STORE_WAIT_SECONDS" in server["environment"]


def test_one_name_reaches_the_server_from_dify_end_to_end() -> None:
    # The name Dify's containers use must be the alias on Dify's network, an allowed Host, the SSRF proxy's
    # allowed domain, the DSL files' ACN_BASE_URL and the plugin's placeholder.
    dify = yaml.safe_load(DIFY_COMPOSE.read_text(encoding="utf-8"))
    # The proxy takes the name on Dify's network: Dify reaches the replicas through nginx (docs/DEPLOYMENT.md §1b).
    assert set(dify["services"]) == {"proxy"}
    aliases = dify["services"]["proxy"]["networks"]["dify"]["aliases"]
    assert aliases == ["agent-context-nodes"]
    assert dify["networks"]["dify"]["external"] is True
    name = aliases[0]
    server = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))["services"]["agent-context-nodes"]
    assert name in server["environment"]["ACN_ALLOWED_HOSTS"]
    guide = (ROOT / "docs" / "DEPLOYMENT.md").read_text(encoding="utf-8")
    assert f"SSRF_PROXY_ALLOW_PRIVATE_DOMAINS={name}" in guide and f"dstdomain {name}" in guide
    assert f"--alias {name}" in guide and "docker-compose.dify.yml" in guide
    for dsl in (ROOT / "examples" / "dify").glob("*.yml"):
        text = dsl.read_text(encoding="utf-8")
        if "ACN_BASE_URL" in text:
            assert f"value: http://{name}:8000" in text, dsl.name
    provider = (ROOT / "integrations" / "dify_plugin" / "provider" / "agent_context_nodes.yaml").read_text(
        encoding="utf-8")
    assert f"http://{name}:8000" in provider
