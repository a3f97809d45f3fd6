"""``make lint``'s type check: mypy on the source tree, laid out as installed, for Linux, macOS and Windows.

mypy names a module after its place under a search path, and ``actors/`` installs as
``sessionmem.actors`` (``[tool.setuptools.package-dir]``), which only the editable
install's import hook knows. So the tree is laid out as the wheel does, as links under
``build/typecheck/`` (:func:`tools.layout.stage`), ``[tool.mypy]`` checks the package
``sessionmem`` there, and each reported path is turned back into the file's own path in
the checkout (``build/typecheck/sessionmem/actors/router.py`` -> ``actors/router.py``).

The tree is checked once per platform of :data:`PLATFORMS` (mypy's ``--platform``): code
for another OS is checked as that OS's standard library has it, and a ``sys.platform``
branch is checked only for its own OS (``sessionmem.protocol.oskit`` holds what differs).
Each platform keeps its own cache (``build/mypy-cache``, then ``-darwin``, ``-win32``), so
each run after the first checks only what changed. What a platform reports is prefixed
with its name.

The platforms are checked at once, one mypy process each (a cold check is CPU-bound, and a
fresh clone's checks are cold); their reports are printed in :data:`PLATFORMS` order.

Extra arguments go to every mypy run. Exits with the worst status of the runs.

Resource handling:
    Each mypy process is waited for; an interrupt stops them all (they share our process group).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tools.layout import ROOT, stage

PLATFORMS = ("linux", "darwin", "win32")
_STAGED_PATH = re.compile(r"^(build/typecheck/sessionmem/[^:]*)(?=:)", re.MULTILINE)


def _real_path(match: re.Match[str]) -> str:
    return os.path.relpath((ROOT / match.group(1)).resolve(), ROOT)


def cache_dir(platform: str) -> str:
    """Where mypy keeps what it knows of the tree for ``platform`` (Linux's is ``[tool.mypy]``'s own)."""
    return "build/mypy-cache" if platform == "linux" else f"build/mypy-cache-{platform}"


def main() -> int:
    os.chdir(ROOT)  # [tool.mypy]'s paths are relative to the checkout
    stage(ROOT, "typecheck")
    runs = {platform: subprocess.Popen(
        [sys.executable, "-m", "mypy", "--platform", platform, "--cache-dir", cache_dir(platform), *sys.argv[1:]],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for platform in PLATFORMS}
    worst = 0
    for platform, run in runs.items():
        out, err = run.communicate()
        lines = _STAGED_PATH.sub(_real_path, out).splitlines(keepends=True)
        sys.stdout.write("".join(f"[{platform}] {line}" for line in lines))
        sys.stderr.write(err)
        worst = max(worst, run.returncode)
    return worst


if __name__ == "__main__":
    sys.exit(main())
