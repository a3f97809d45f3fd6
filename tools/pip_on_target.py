"""Run pip as if on other platforms: ``python -m tools.pip_on_target JOBS.json``.

pip's ``--platform``, ``--python-version`` and ``--implementation`` choose the wheels, but
the environment markers of every requirement (``onnxruntime==1.23.2; sys_platform ==
"darwin"``, a dependency's ``pywin32; sys_platform == "win32"``) are still evaluated for the
interpreter pip runs on (pypa/pip#11664): resolving for Windows on Linux would skip Windows'
own dependencies and take Linux's. This runs pip in this process with its marker
environment replaced by each job's ``markers`` (PEP 508's names: ``sys_platform``,
``platform_machine``, ``python_version``...), so the markers of the pins and of everything
they pull in are evaluated for the target, as a pip running there would.

``JOBS.json`` is a list of ``{"markers": {...}, "args": [pip arguments], "stderr": path}``.
The jobs run one after another in this process: pip parses each index page once per
process (its parse cache is keyed by the page's address), which is most of a resolution's
CPU time when many targets share the same pins. Each job's pip output goes to its
``stderr`` file (its stdout too); one line of JSON per job on stdout gives its exit status.

It replaces ``default_environment`` of pip's vendored ``packaging.markers``, which every
``Marker.evaluate`` asks for its values (pip 26). Should a later pip evaluate markers
elsewhere, the check below fails loudly rather than resolving for the wrong platform.

Error handling:
    Exits 2, saying why, when the jobs cannot be read or this pip cannot be retargeted;
    otherwise 0, whatever pip said (each job's status is on stdout).
"""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Any


def _jobs(path: str) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as file:
        jobs = json.load(file)
    if not isinstance(jobs, list) or not all(
            isinstance(job, dict) and isinstance(job.get("markers"), dict) and isinstance(job.get("args"), list)
            and isinstance(job.get("stderr"), str) for job in jobs):
        raise ValueError("a list of {markers, args, stderr} objects")
    return jobs


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tools.pip_on_target JOBS.json", file=sys.stderr)
        return 2
    try:
        jobs = _jobs(argv[0])
    except (OSError, ValueError) as exc:
        print(f"pip_on_target: cannot read the jobs: {exc}", file=sys.stderr)
        return 2
    from pip._internal.cli.main import main as pip_main
    from pip._vendor.packaging import markers as pip_markers

    names = set(pip_markers.default_environment())
    target: dict[str, str] = {}
    pip_markers.default_environment = lambda: dict(target)  # type: ignore[assignment,return-value]
    for job in jobs:
        if set(job["markers"]) != names:
            print(f"pip_on_target: markers must name exactly {sorted(names)}", file=sys.stderr)
            return 2
        target.clear()
        target.update(job["markers"])
        if not pip_markers.Marker(f'sys_platform == "{target["sys_platform"]}"').evaluate():
            print("pip_on_target: this pip does not evaluate markers through packaging.markers.default_environment",
                  file=sys.stderr)
            return 2
        with open(job["stderr"], "w", encoding="utf-8") as output, \
                contextlib.redirect_stderr(output), contextlib.redirect_stdout(output):
            try:
                status = int(pip_main(list(job["args"])) or 0)
            except SystemExit as exc:
                status = exc.code if isinstance(exc.code, int) else 1
        print(json.dumps({"status": status}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
