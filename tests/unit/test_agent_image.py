"""The agent image (chaos.cluster.images.AGENT_MODULES) carries every module of this repository its processes
(the shaper, the wire agent) import, apart from the node package the node image has; a new import that the list
misses fails here instead of on a remote host."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from chaos.cluster import compiled, images

REPO = Path(__file__).resolve().parents[2]
LOADED = ("import importlib, json, sys\n"
          f"for name in {images.AGENT_ENTRIES!r}: importlib.import_module(name)\n"
          f"for name in {images.AGENT_LAZY_IMPORTS!r}: importlib.import_module(name)\n"
          "print(json.dumps(sorted(getattr(m, '__file__', None) or '' for n, m in sys.modules.items()\n"
          "                        if n == 'chaos' or n.startswith('chaos.'))))\n")


def test_the_agent_image_carries_every_chaos_module_its_processes_import():
    out = subprocess.run([sys.executable, "-c", LOADED], cwd=REPO, capture_output=True, text=True, check=True)
    loaded = {Path(f).resolve() for f in json.loads(out.stdout) if f}
    shipped = {p.resolve() for p in images._agent_files(REPO)}
    assert loaded, out.stdout
    assert loaded <= shipped, sorted(str(p.relative_to(REPO)) for p in loaded - shipped)


def test_the_agent_tag_follows_the_shaper_sources(tmp_path):
    for rel in ["images/agent/Dockerfile", "images/node/Dockerfile", "images/base/packages.txt", "pyproject.toml",
                *(str(p.relative_to(REPO)) for p in images._agent_files(REPO)),
                *(str(p.relative_to(REPO)) for p in compiled.node_sources(REPO))]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes((REPO / rel).read_bytes())
    before = images.agent_tag(tmp_path)
    engine = tmp_path / "chaos/net/shaper/engine.py"
    engine.write_text(engine.read_text() + "\n# changed\n")
    assert images.agent_tag(tmp_path) != before
    assert images.agent_tag(tmp_path).startswith("splitlab-agent:")
