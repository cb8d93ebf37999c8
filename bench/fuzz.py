"""Hostile input at scale: schemathesis against our own /openapi.json (the nodes) and /openapi-admin.json (the
administration routes) on a loopback server.

Run: .venv/bin/python -m bench.fuzz [--examples 1100]
(9 + 5 operations, ≈ 10,000 generated cases: hypothesis stops early on small input spaces.)
Checks: no 5xx, every response conforms to its schema, status code and content type. Prints the summary
schemathesis prints; exits non-zero on any failure. The default test run does a short version of this.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from tests.conftest import serving

CHECKS = "not_a_server_error,response_schema_conformance,status_code_conformance,content_type_conformance"


DOCUMENTS = ("openapi.json", "openapi-admin.json")


def fuzz(examples: int, workers: int = 2, seed: int | None = None,
         document: str = "openapi.json") -> subprocess.CompletedProcess[str]:
    """Start a server on a fresh store, run schemathesis against one of its documents, and return the run."""
    with serving() as base:
        command = [str(Path(sys.executable).parent / "schemathesis"), "run", f"{base}/{document}",
                   "--checks", CHECKS, "--phases", "fuzzing", "--max-examples", str(examples),
                   "-w", str(workers), "--no-color"]
        if seed is not None:
            command += ["--seed", str(seed)]
        return subprocess.run(command, capture_output=True, text=True, timeout=3600)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--examples", type=int, default=1100, help="generated cases per operation")
    args = parser.parse_args()
    runs = [fuzz(args.examples, document=document) for document in DOCUMENTS]
    for run in runs:
        print(run.stdout[-4000:])
    sys.exit(max(run.returncode for run in runs))


if __name__ == "__main__":
    main()
