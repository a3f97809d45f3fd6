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
The jobs run one after another in this process, and an index page whose bytes are the
same as before is parsed once for all of them: parsing pages (64,000 links for the
runtime pins) is most of a resolution's CPU time, and the targets share the pins. pip
still asks the index for each page each time. Each job's pip output goes to its
``stderr`` file (its stdout too); one line of JSON per job on stdout gives its exit status.

It replaces ``default_environment`` of pip's vendored ``packaging.markers``, which every
``Marker.evaluate`` asks for its values, and ``parse_links`` as the package finder calls
it (pip 26). Should a later pip evaluate markers elsewhere, the check below fails loudly
rather than resolving for the wrong platform.

Error handling:
    Exits 2, saying why, when the jobs cannot be read or this pip cannot be retargeted;
    otherwise 0, whatever pip said (each job's status is on stdout).
"""

from __future__ import annotations

import contextlib
import hashlib
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
    from pip._internal.index import package_finder
    from pip._vendor.packaging import markers as pip_markers

    parse_links, parsed = package_finder.parse_links, {}

    def parse_once(page: Any) -> Any:  # the same page, byte for byte: the same links
        key = (page.url, hashlib.sha256(page.content).digest())
        if key not in parsed:
            parsed[key] = list(parse_links(page))
        return parsed[key]

    package_finder.parse_links = parse_once

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
