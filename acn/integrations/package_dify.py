"""Build the Dify plugin packages: `python -m acn.integrations.package_dify [-o dist/x.difypkg]`.

A .difypkg is a zip of the plugin directory with manifest.yaml at its root and forward-slash paths, minus the
.difyignore patterns — what `dify plugin package` writes (read from dify-plugin-daemon's packager; the Go CLI
is not installable from PyPI, so this script stands in for it). The package is unsigned: self-hosted Dify
installs it with FORCE_VERIFYING_SIGNATURE=false, or after `dify signature sign`.
"""

from __future__ import annotations

import argparse
import fnmatch
import sys
import zipfile
from pathlib import Path

from acn.common.pack import PACK
from acn.integrations.generate import PLUGIN_DIR, PLUGIN_NAME, ROOT, STRATEGY_DIR, STRATEGY_PLUGIN
from acn.integrations.strategy_files import SHARED_FILES

# dify-plugin-daemon's default MAX_PLUGIN_PACKAGE_SIZE (uncompressed).
MAX_BYTES = 52_428_800
# A plugin folder that takes some files from another (their one source): the strategy takes the client, privacy
# note, requirements and icon from the tool plugin's folder.
SHARED_FROM = {STRATEGY_DIR: PLUGIN_DIR}


def ignore_patterns(plugin_dir: Path) -> list[str]:
    """Return the .difyignore patterns (gitignore syntax; the subset this plugin uses)."""
    path = plugin_dir / ".difyignore"
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def ignored(relative: str, patterns: list[str]) -> bool:
    """Return True when a path matches a pattern: `dir/` matches the directory anywhere, else a name glob."""
    parts = relative.split("/")
    for pattern in patterns:
        if pattern.endswith("/"):
            if pattern.rstrip("/") in parts[:-1]:
                return True
        elif fnmatch.fnmatch(parts[-1], pattern) or fnmatch.fnmatch(relative, pattern):
            return True
    return False


def package_files(plugin_dir: Path) -> dict[str, Path]:
    """Return the files that go into the package by their path inside it, sorted: the folder's own, and those it
    shares with another plugin's folder (SHARED_FROM)."""
    patterns = ignore_patterns(plugin_dir)
    files = {p.relative_to(plugin_dir).as_posix(): p for p in plugin_dir.rglob("*") if p.is_file()}
    if plugin_dir in SHARED_FROM:
        files.update({name: SHARED_FROM[plugin_dir] / name for name in SHARED_FILES})
    return {name: files[name] for name in sorted(files) if not ignored(name, patterns)}


def build(output: Path, plugin_dir: Path = PLUGIN_DIR) -> Path:
    """Write the package and return its path; refuse one larger than the daemon accepts."""
    files = package_files(plugin_dir)
    size = sum(p.stat().st_size for p in files.values())
    if size > MAX_BYTES:
        raise SystemExit(f"plugin is {size} bytes uncompressed; the daemon accepts at most {MAX_BYTES}")
    output.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(output, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, path in files.items():
            archive.write(path, name)
    return output


def main(argv: list[str] | None = None) -> int:
    """Write the two packages: the tools (context nodes and the external-memory callbacks) and the agent strategy
    (the daemon refuses one plugin declaring both)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = ROOT / "dist" / f"{PLUGIN_NAME}-{PACK['version']}.difypkg"
    parser.add_argument("-o", "--output", type=Path, default=default)
    parser.add_argument("--strategy-output", type=Path,
                        default=ROOT / "dist" / f"{STRATEGY_PLUGIN}-{PACK['version']}.difypkg")
    args = parser.parse_args(argv)
    for path in (build(args.output), build(args.strategy_output, STRATEGY_DIR)):
        print(f"wrote {path} ({path.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
