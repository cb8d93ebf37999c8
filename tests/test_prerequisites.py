"""`make test` on machines without Python 3.12 or Chromium: found where they usually are, else the tests that need
them skip with the reason, except under CI=true where they are required."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT, missing_prerequisite

FIND = ROOT / "tests" / "py312" / "find_python312.sh"


def bare_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """An environment with no Python 3.12 anywhere: a PATH of basic tools only, an empty pyenv root and HOME."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in ("sh", "make", "ls", "sort", "printf", "cat", "id", "grep", "tail", "env"):
        found = shutil.which(tool)
        if found and not (bin_dir / tool).exists():
            (bin_dir / tool).symlink_to(found)
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path / "home"), "PYENV_ROOT": str(tmp_path / "pyenv")}
    env.update(extra)
    return env


def fake_python(path: Path) -> Path:
    """A stand-in interpreter that answers the 3.12 check with success."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


def find(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", str(FIND)], env=env, capture_output=True, text=True, timeout=60)


def test_python312_is_found_under_pyenv_and_by_name(tmp_path: Path) -> None:
    assert find(bare_env(tmp_path)).returncode == 1
    older = fake_python(tmp_path / "pyenv" / "versions" / "3.12.2" / "bin" / "python")
    newer = fake_python(tmp_path / "pyenv" / "versions" / "3.12.10" / "bin" / "python")
    found = find(bare_env(tmp_path))
    assert found.returncode == 0 and found.stdout.strip() == str(newer)  # 3.12.10 sorts after 3.12.2
    named = find(bare_env(tmp_path, PYTHON312=str(older)))
    assert named.stdout.strip() == str(older)


def test_a_python312_setting_that_is_not_3_12_is_refused(tmp_path: Path) -> None:
    refused = find(bare_env(tmp_path, PYTHON312=str(tmp_path / "missing" / "python")))
    assert refused.returncode == 1 and "is not a Python 3.12 interpreter" in refused.stderr


@pytest.mark.parametrize("ci", ["", "true"])
def test_make_without_python312_skips_outside_ci_and_fails_under_ci(tmp_path: Path, ci: str) -> None:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    env = bare_env(tmp_path, **({"CI": ci} if ci else {}))
    result = subprocess.run(["make", "-s", f"VENV312={tmp_path / 'venv312'}", f"{tmp_path / 'venv312'}/.installed"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert not (tmp_path / "venv312").exists()
    if ci:
        assert result.returncode != 0 and "CI=true needs it" in result.stderr
    else:
        assert result.returncode == 0 and "the Dify tests will be SKIPPED" in result.stderr


def test_a_missing_prerequisite_skips_with_its_reason_or_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="prerequisite missing: Python 3.12"):
        missing_prerequisite("Python 3.12 is missing")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true: required"):
        missing_prerequisite("Python 3.12 is missing")


def test_make_browser_never_runs_apt_get_unless_root(tmp_path: Path) -> None:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    if os.geteuid() == 0:
        # As root it would install; check only that the recipe tests for root before apt-get.
        recipe = subprocess.run(["make", "-n", "browser"], cwd=ROOT, capture_output=True, text=True, timeout=60)
        text = recipe.stdout
        assert text.index('id -u') < text.index("apt-get install")
        return
    env = bare_env(tmp_path)
    result = subprocess.run(["make", "-s", "browser"], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0 and "browser tests will be SKIPPED" in result.stderr
