#!/bin/sh
# Print the path of a Python 3.12 interpreter, or nothing (exit 1). Looked for, in order: $PYTHON312,
# python3.12 on PATH, pyenv's versions (newest 3.12.x first), then uv's managed interpreters.
is312() {
    [ -n "$1" ] && [ -x "$1" ] && "$1" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null
}
found() { printf '%s\n' "$1"; exit 0; }

if [ -n "${PYTHON312:-}" ]; then
    candidate=$(command -v "$PYTHON312" 2>/dev/null || printf '%s' "$PYTHON312")
    is312 "$candidate" && found "$candidate"
    echo "PYTHON312=$PYTHON312 is not a Python 3.12 interpreter" >&2
    exit 1
fi
candidate=$(command -v python3.12 2>/dev/null) && is312 "$candidate" && found "$candidate"
root=$(pyenv root 2>/dev/null || printf '%s' "${PYENV_ROOT:-$HOME/.pyenv}")
for candidate in $(ls -d "$root"/versions/3.12.*/bin/python 2>/dev/null | sort -r -V); do
    is312 "$candidate" && found "$candidate"
done
if command -v uv >/dev/null 2>&1; then
    candidate=$(uv python find 3.12 2>/dev/null) && is312 "$candidate" && found "$candidate"
fi
exit 1
