"""The one way a bench script writes its figures as JSON (``--out FILE``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_json(result: Any, out: Path | None) -> None:
    """``result`` as indented JSON in ``out`` (its folders made), or nothing when ``out`` is ``None``."""
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n")
