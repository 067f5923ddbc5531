"""Where splitlab keeps what it makes once per machine and may always remove: the user's cache directory
(`$XDG_CACHE_HOME/splitlab`, else `~/.cache/splitlab`), one folder per kind of thing (the analysis JVM's class
archive, the node's compiled build). Outside any checkout, so that every clone on the machine (CI's fresh one
among them) finds what another made; each thing's name holds a digest of what it was made from. In `node`, the
package every other imports (as it does `node.errors`), so the pipeline and the controller share it."""
from __future__ import annotations

import os
from pathlib import Path


def user_cache(kind: str) -> Path:
    """`$XDG_CACHE_HOME/splitlab/<kind>`, else `~/.cache/splitlab/<kind>` (not created here)."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "splitlab" / kind
