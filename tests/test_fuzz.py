"""A short schemathesis run in the default suite (bench/fuzz.py runs ~10,000 cases)."""

from __future__ import annotations

import re

import pytest

from bench.fuzz import DOCUMENTS, fuzz


@pytest.mark.parametrize("document", DOCUMENTS)
def test_generated_requests_never_get_a_5xx_or_a_response_outside_its_schema(document: str) -> None:
    run = fuzz(examples=20, workers=1, seed=20261130, document=document)  # one worker: the same cases every run
    summary = run.stdout[-3000:]
    assert run.returncode == 0, summary
    generated = re.search(r"(\d+) generated", summary)
    assert generated and int(generated.group(1)) >= 80, summary
    assert "failed" not in summary.split("SUMMARY")[-1].lower() or "0 failed" in summary, summary
