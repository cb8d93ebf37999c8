"""The wheel a user installs adds one import name, `acn`, and the `acn` command: nothing that shadows their own
`app`, `common` or `text` (issue 30)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_wheel_installs_acn_and_nothing_beside_it(tmp_path: Path) -> None:
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
                            "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = tmp_path.glob("agent_context_nodes-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        entry_points = archive.read(info).decode()
        top_level = {n.split("/")[0] for n in names if ".dist-info/" not in n}
    assert top_level == {"acn"}
    assert "acn = acn.app.cli:main" in entry_points
    # The inspector's pages and the node registry travel inside the one package; the Dify plugin's sources
    # (packaged on their own as a .difypkg) do not.
    assert "acn/inspector/templates/inspector/session.html" in names
    assert "acn/inspector/static/inspector.css" in names or any(n.startswith("acn/inspector/static/") for n in names)
    assert "acn/nodes/assemble.py" in names and "acn/server.py" in names
    assert "acn/retrieval/ranker_model.json" in names  # the learned ranker's trees (ACN_RANKER=learned)
    assert not any(n.startswith(("acn/integrations/dify_plugin/", "integrations/")) for n in names)
