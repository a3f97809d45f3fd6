"""``make lint``'s type check: mypy on the source tree, laid out as installed.

mypy names a module after its place under a search path, and ``actors/`` installs as
``sessionmem.actors`` (``[tool.setuptools.package-dir]``), which only the editable
install's import hook knows. So the tree is laid out as the wheel does, as links under
``build/typecheck/`` (:func:`tools.layout.stage`), ``[tool.mypy]`` checks the package
``sessionmem`` there, and each reported path is turned back into the file's own path in
the checkout (``build/typecheck/sessionmem/actors/router.py`` -> ``actors/router.py``).

Extra arguments go to mypy. Exits with mypy's status.
"""

from __future__ import annotations

import os
import re
import sys

from mypy import api

from tools.layout import ROOT, stage

_STAGED_PATH = re.compile(r"^(build/typecheck/sessionmem/[^:]*)(?=:)", re.MULTILINE)


def _real_path(match: re.Match[str]) -> str:
    return os.path.relpath((ROOT / match.group(1)).resolve(), ROOT)


def main() -> int:
    os.chdir(ROOT)  # [tool.mypy]'s paths are relative to the checkout
    stage(ROOT, "typecheck")
    out, err, status = api.run(sys.argv[1:])
    sys.stdout.write(_STAGED_PATH.sub(_real_path, out))
    sys.stderr.write(err)
    return status


if __name__ == "__main__":
    sys.exit(main())
