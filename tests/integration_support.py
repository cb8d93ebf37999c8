"""Helpers of the platform-integration tests; their fixtures are in tests/integration_fixtures.py.

- the real server process on loopback: `start_server` / `stop_process` in tests/conftest.py.
- a stand-in for Dify's code sandbox (langgenius/dify-sandbox's POST /v1/sandbox/run protocol) that runs the
  code with the Python 3.12 interpreter, so graphon's real code nodes execute.
- `run_py312`: run a script from tests/py312 in the Python 3.12 environment and return its JSON output.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.conftest import ROOT, missing_prerequisite, server_env

PY312 = ROOT / ".venv312" / "bin" / "python"
PY312_SCRIPTS = ROOT / "tests" / "py312"
API_KEY = "integration-key-1"
TENANT = "integration"
SANDBOX_KEY = "test-sandbox-key"
# dify-sandbox kills a run after SANDBOX_WORKER_TIMEOUT (15 s by default); so does the stand-in.
SANDBOX_TIMEOUT = 15


@dataclass(frozen=True)
class LiveServer:
    base_url: str
    api_key: str

    def post(self, node: str, body: dict[str, Any], key: str | None = None) -> requests.Response:
        headers = {"Authorization": f"Bearer {key or self.api_key}"}
        return requests.post(f"{self.base_url}/v1/nodes/{node}", json=body, headers=headers, timeout=60)



def require_py312() -> Path:
    """Return the 3.12 interpreter; without it the test is skipped with the reason (failed under CI=true)."""
    if not PY312.exists():
        missing_prerequisite(f"{PY312} is missing: install Python 3.12 (python3.12 on PATH, pyenv or uv) or pass "
                             "PYTHON312=/path/to/python3.12, then run `make test` (it builds .venv312 with "
                             "dify_plugin and graphon)")
    return PY312


def run_py312(script: str, *args: str, timeout: float = 180, cwd: Path | None = None) -> Any:
    """Run tests/py312/<script> with the 3.12 interpreter and return the JSON it prints last."""
    result = subprocess.run([str(require_py312()), str(PY312_SCRIPTS / script), *args], cwd=cwd or ROOT,
                            capture_output=True, text=True, timeout=timeout, env=server_env())
    if result.returncode != 0:
        pytest.fail(f"{script} exited {result.returncode}\nstdout:\n{result.stdout[-3000:]}\n"
                    f"stderr:\n{result.stderr[-5000:]}")
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    if not lines:
        pytest.fail(f"{script} printed nothing\nstderr:\n{result.stderr[-5000:]}")
    return json.loads(lines[-1])


class SandboxHandler(BaseHTTPRequestHandler):
    """Answer POST /v1/sandbox/run like dify-sandbox: {code: 0, data: {stdout, error}}."""

    def do_POST(self) -> None:  # noqa: N802 - the http.server naming
        if self.path != "/v1/sandbox/run" or self.headers.get("X-Api-Key") != SANDBOX_KEY:
            self._reply(401 if self.path == "/v1/sandbox/run" else 404, {"code": -1, "message": "denied"})
            return
        request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        if request.get("language") != "python3":
            self._reply(200, {"code": -400, "message": f"unsupported language {request.get('language')}"})
            return
        stdout, error = run_sandboxed(request.get("preload", "") + "\n" + request["code"])
        self._reply(200, {"code": 0, "message": "success", "data": {"stdout": stdout, "error": error}})

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the http.server signature
        return


def run_sandboxed(code: str) -> tuple[str, str]:
    """Run the program with the 3.12 interpreter (which, like the sandbox image, has requests and httpx)."""
    with tempfile.NamedTemporaryFile("w", suffix=".py", encoding="utf-8", delete=False) as handle:
        handle.write(code)
    try:
        result = subprocess.run([str(require_py312()), "-I", handle.name], capture_output=True, text=True,
                                timeout=SANDBOX_TIMEOUT, env=server_env())
    except subprocess.TimeoutExpired:
        return "", f"error: timeout after {SANDBOX_TIMEOUT}s"
    finally:
        Path(handle.name).unlink()
    return result.stdout, (result.stderr if result.returncode else "")
