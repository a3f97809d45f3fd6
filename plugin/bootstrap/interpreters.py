"""Find the Python that sessionmem's environment is made from, or say exactly what to install.

Used by ``install.py`` (standard library only). It runs under whatever ``python3`` the
hook found, Apple's 3.9 included, so its syntax stays 3.9-compatible (no ``match``, no
``X | Y`` outside annotations).

The search, :func:`find_python`: every candidate is *asked* its version (run with ``-I -c``
and :data:`PROBE`, under a timeout), never trusted by its name. A candidate is suitable
when it is CPython, between :data:`OLDEST` and :data:`NEWEST` (the versions sessionmem's
pins have wheels for), not a free-threaded build, and has a working ``venv`` (its
``ensurepip`` and the pip it bundles: Debian and Ubuntu split those into ``python3.X-venv``).
The newest suitable one wins; between two of one version, the earlier candidate. The
candidates, in this order (duplicates by real path asked once):

1. the interpreter running this search;
2. ``python3.14`` ... ``python3.11`` and ``python3`` on ``PATH``;
3. the usual places, which a ``PATH`` given to an app started from the macOS Dock lacks:
   Homebrew (``/opt/homebrew/bin``, ``/usr/local/bin``, ``.../opt/python@3.X/bin``),
   python.org's framework (``/Library/Frameworks/Python.framework/Versions/3.X/bin``),
   pyenv (``$PYENV_ROOT`` or ``~/.pyenv``, ``versions/*/bin/python``), Pythons uv
   installed (``$UV_PYTHON_INSTALL_DIR`` or ``~/.local/share/uv/python``,
   ``cpython-*/bin/python3``);
4. ``uv python find --system`` when ``uv`` exists (on ``PATH``, ``~/.local/bin``,
   ``~/.cargo/bin`` or Homebrew's).

When none is suitable and ``uv`` exists, :func:`provision_with_uv` installs uv's own
CPython (``uv python install``) and that is asked like any other. Else :class:`NoPython`
carries one sentence for the user: what to install on this OS (:func:`what_to_install`).

Error handling:
    A candidate that fails to start, hangs past the timeout (its whole process group is
    killed), exits non-zero or answers something else is refused with that reason; the
    search itself never raises but :class:`NoPython`.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
from typing import Any, Callable, NamedTuple, Optional

OLDEST = (3, 11)
NEWEST = (3, 14)  # the newest the pinned dependencies have wheels for; raise it with them
MINORS = tuple(range(NEWEST[1], OLDEST[1] - 1, -1))  # newest first: 14, 13, 12, 11
UV_REQUEST = f">={OLDEST[0]}.{OLDEST[1]},<{NEWEST[0]}.{NEWEST[1] + 1}"  # for `uv python find`
PROVISION = "3.13"  # what `uv python install` gets when no suitable Python is found
PROBE_TIMEOUT_S = 10.0  # a first start of a freshly downloaded macOS Python can take seconds
PROVISION_TIMEOUT_S = 600.0

# Asked of each candidate; its answer is one line of JSON. Written for any Python 3.
PROBE = """\
import json, sys
answer = {"implementation": sys.implementation.name, "version": list(sys.version_info[:3]),
          "executable": sys.executable, "free_threaded": False, "venv": ""}
try:
    import sysconfig
    answer["free_threaded"] = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
except Exception:
    pass
try:
    import ensurepip, venv
    ensurepip.version()
except Exception as exc:
    answer["venv"] = "%s: %s" % (type(exc).__name__, exc)
print(json.dumps(answer))
"""


class Answer(NamedTuple):
    """What a candidate said of itself."""

    implementation: str
    version: tuple[int, int, int]
    executable: str
    free_threaded: bool
    venv_problem: str  # "" when venv and ensurepip work

    @property
    def version_text(self) -> str:
        return ".".join(map(str, self.version))


class Verdict(NamedTuple):
    """One candidate: its path, its answer (None when it gave none) and why it was refused ("" if not)."""

    path: str
    answer: Optional[Answer]
    refused: str

    def describe(self) -> str:
        if not self.refused:
            return f"suitable: {self.path} ({self.answer.version_text if self.answer else '?'})"
        detail = f" ({self.answer.venv_problem})" if self.answer and self.answer.venv_problem else ""
        return f"refused: {self.path}: {self.refused}{detail}"


class NoPython(Exception):
    """No suitable Python; ``str()`` is the sentence to show the user."""


# -- candidates ------------------------------------------------------------------------------


def names() -> list[str]:
    return [f"python3.{minor}" for minor in MINORS] + ["python3"]


def fixed_places(home: str, environ: dict[str, str]) -> list[str]:
    """The usual installation places, whether or not ``PATH`` names them."""
    places = []
    for prefix in ("/opt/homebrew", "/usr/local"):
        places += [os.path.join(prefix, "bin", name) for name in names()]
        places += [f"{prefix}/opt/python@3.{minor}/bin/python3.{minor}" for minor in MINORS]
    places += [f"/Library/Frameworks/Python.framework/Versions/3.{minor}/bin/python3.{minor}" for minor in MINORS]
    pyenv = environ.get("PYENV_ROOT") or os.path.join(home, ".pyenv")
    places += sorted(glob.glob(os.path.join(pyenv, "versions", "*", "bin", "python")), reverse=True)
    uv_pythons = environ.get("UV_PYTHON_INSTALL_DIR") or os.path.join(home, ".local", "share", "uv", "python")
    places += sorted(glob.glob(os.path.join(uv_pythons, "cpython-3.*", "bin", "python3")), reverse=True)
    return places


def find_uv(home: str, path: Optional[str]) -> Optional[str]:
    found = shutil.which("uv", path=path)
    if found:
        return found
    for place in (os.path.join(home, ".local", "bin", "uv"), os.path.join(home, ".cargo", "bin", "uv"),
                  "/opt/homebrew/bin/uv", "/usr/local/bin/uv"):
        if os.access(place, os.X_OK):
            return place
    return None


def uv_find(uv: str, timeout: float, request: str = UV_REQUEST) -> Optional[str]:
    """``uv python find --system``: an interpreter uv knows of (not a project's virtual environment)."""
    code, out, _ = ask([uv, "python", "find", "--system", request], timeout)
    found = out.strip().splitlines()[-1] if code == 0 and out.strip() else ""
    return found if os.path.isabs(found) else None


def candidates(running: str, path: Optional[str], home: str, environ: dict[str, str],
               places: Optional[list[str]] = None) -> list[str]:
    """Every executable candidate, in the order of the module's docstring, each real path once."""
    found = [running] if running else []
    found += [which for which in (shutil.which(name, path=path) for name in names()) if which]
    found += [place for place in (fixed_places(home, environ) if places is None else places)
              if os.path.isfile(place) and os.access(place, os.X_OK)]
    unique, seen = [], set()
    for candidate in found:
        real = os.path.realpath(candidate)
        if real not in seen:
            seen.add(real)
            unique.append(candidate)
    return unique


# -- asking ----------------------------------------------------------------------------------


def ask(command: list[str], timeout: float) -> tuple[Optional[int], str, str]:
    """Run ``command``: (exit status, or None when it did not finish in time; stdout; stderr).

    Resource handling: the command runs in its own process group, killed whole on timeout, so
    a child it started cannot hold the pipes open.
    """
    try:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, start_new_session=True)
    except OSError as exc:
        return -1, "", f"did not start: {exc}"
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except OSError:
            pass
        process.communicate()
        return None, "", ""
    return process.returncode, out.decode(errors="replace"), err.decode(errors="replace")


def judge(path: str, timeout: float) -> Verdict:
    code, out, err = ask([path, "-I", "-c", PROBE], timeout)
    if code is None:
        return Verdict(path, None, f"did not answer within {timeout:g} s")
    if code != 0:
        last = (err.strip().splitlines() or [""])[-1][:200]
        if code == -1 and last.startswith("did not start"):
            return Verdict(path, None, last)
        return Verdict(path, None, f"exited with status {code}" + (f": {last}" if last else ""))
    try:
        said = json.loads(out.strip().splitlines()[-1])
        major, minor, micro = (int(part) for part in said["version"])
        answer = Answer(str(said["implementation"]), (major, minor, micro), str(said["executable"]),
                        bool(said["free_threaded"]), str(said["venv"]))
    except (ValueError, KeyError, TypeError, IndexError):
        return Verdict(path, None, f"answered something else: {out.strip()[:200]!r}")
    return Verdict(path, answer, refusal(answer))


def refusal(answer: Answer) -> str:
    """Why ``answer`` does not do for sessionmem ("" when it does)."""
    if answer.implementation != "cpython":
        return f"{answer.implementation} {answer.version_text}, not CPython"
    if answer.version[:2] < OLDEST:
        return f"{answer.version_text}, older than {OLDEST[0]}.{OLDEST[1]}"
    if answer.version[:2] > NEWEST:
        return f"{answer.version_text}, newer than sessionmem supports ({NEWEST[0]}.{NEWEST[1]})"
    if answer.free_threaded:
        return f"{answer.version_text}, a free-threaded build (its wheels are not published)"
    if answer.venv_problem:
        return f"{answer.version_text} without its venv module"
    return ""


def best(verdicts: list[Verdict]) -> Optional[Verdict]:
    """The newest suitable verdict; between equals, the earliest."""
    suitable = [(index, verdict) for index, verdict in enumerate(verdicts) if not verdict.refused and verdict.answer]
    if not suitable:
        return None
    return min(suitable, key=lambda pair: (-pair[1].answer.version[0], -pair[1].answer.version[1], pair[0]))[1]


# -- the search ------------------------------------------------------------------------------


class Search(NamedTuple):
    chosen: Optional[Verdict]
    verdicts: list[Verdict]  # every candidate asked, in order
    uv: Optional[str]


def search(running: str = sys.executable, path: Optional[str] = None, home: Optional[str] = None,
           environ: Optional[dict[str, str]] = None, places: Optional[list[str]] = None,
           timeout: float = PROBE_TIMEOUT_S) -> Search:
    """Ask every candidate (``places`` replaces :func:`fixed_places`, for tests)."""
    environ = dict(os.environ) if environ is None else environ
    path = environ.get("PATH", os.defpath) if path is None else path
    home = home or environ.get("HOME") or os.path.expanduser("~")
    verdicts: list[Verdict] = []
    executables: set[str] = set()

    def consider(candidate: str) -> None:
        verdict = judge(candidate, timeout)
        if verdict.answer is not None and os.path.isabs(verdict.answer.executable):
            executable = os.path.realpath(verdict.answer.executable)
            if executable in executables:
                return  # another name of one asked already (a pyenv shim, python3 -> python3.X)
            executables.add(executable)
        verdicts.append(verdict)

    listed = candidates(running, path, home, environ, places)
    for candidate in listed:
        consider(candidate)
    uv = find_uv(home, path)
    if uv:
        found = uv_find(uv, timeout)
        if found and os.path.realpath(found) not in {os.path.realpath(c) for c in listed}:
            consider(found)
    return Search(best(verdicts), verdicts, uv)


def provision_with_uv(uv: str, timeout: float = PROBE_TIMEOUT_S,
                      install_timeout: float = PROVISION_TIMEOUT_S) -> Verdict:
    """``uv python install`` (uv's own CPython, in uv's directory), then ask it like any other."""
    code, out, err = ask([uv, "python", "install", PROVISION], install_timeout)
    if code != 0:
        reason = "timed out" if code is None else f"exited with status {code}: {(err or out).strip()[-300:]}"
        return Verdict(f"uv python install {PROVISION}", None, reason)
    found = uv_find(uv, timeout, PROVISION)
    if not found:
        return Verdict(f"uv python find {PROVISION}", None, "uv installed it but does not find it")
    return judge(found, timeout)


def find_python(log: Callable[[str], None] = print, **options: Any) -> Verdict:
    """The suitable Python (its verdict), provisioned with uv if need be; logs every verdict.

    Raises :class:`NoPython` with the sentence for the user when there is none.
    """
    found = search(**options)
    for verdict in found.verdicts:
        log(verdict.describe())
    if found.chosen:
        return found.chosen
    if found.uv:
        log(f"no suitable Python: installing CPython {PROVISION} with {found.uv}")
        provisioned = provision_with_uv(found.uv, options.get("timeout", PROBE_TIMEOUT_S))
        log(provisioned.describe())
        if not provisioned.refused:
            return provisioned
        raise NoPython(f"sessionmem needs Python {OLDEST[0]}.{OLDEST[1]} or newer and found none; `uv python "
                       f"install {PROVISION}` failed ({provisioned.refused[:200]}). {what_to_install(found.verdicts)}")
    raise NoPython(f"sessionmem needs Python {OLDEST[0]}.{OLDEST[1]} or newer and found none"
                   f"{found_instead(found.verdicts)}. {what_to_install(found.verdicts)}")


# -- what to tell the user -------------------------------------------------------------------


def found_instead(verdicts: list[Verdict]) -> str:
    """The Pythons that answered, briefly (at most three): what changes when the user installs one."""
    answered = [v for v in verdicts if v.answer is not None]
    if not answered:
        return ""
    return " (" + "; ".join(f"{v.path} is {v.refused}" for v in answered[:3]) + ")"


def os_release(path: str = "/etc/os-release") -> list[str]:
    """This Linux distribution's ID then its ID_LIKE words (empty when unknown)."""
    fields = {}
    try:
        with open(path, encoding="utf-8") as file:
            for line in file:
                key, _, value = line.strip().partition("=")
                fields[key] = value.strip("\"'")
    except OSError:
        return []
    return [fields.get("ID", ""), *fields.get("ID_LIKE", "").split()]


# A distribution (os-release ID or ID_LIKE) -> the command that installs a Python 3.11 or newer
# with its venv module, where its current releases have one.
LINUX_INSTALL = {
    "debian": "`sudo apt install python3 python3-venv` (Debian 12, Ubuntu 24.04 and newer)",
    "ubuntu": "`sudo apt install python3 python3-venv` (Ubuntu 24.04 and newer)",
    "rhel": "`sudo dnf install python3.12`",
    "fedora": "`sudo dnf install python3`",
    "arch": "`sudo pacman -S python`",
    "suse": "`sudo zypper install python313`",
    "opensuse": "`sudo zypper install python313`",
    "alpine": "`sudo apk add python3`",
}
UV_INSTALL = "`curl -LsSf https://astral.sh/uv/install.sh | sh`"
THEN = "; the next session sets memory up"


def what_to_install(verdicts: list[Verdict], platform: str = sys.platform,
                    distribution: Optional[list[str]] = None) -> str:
    """The one thing to do, for this OS: a sentence."""
    lacking_venv = [v.answer for v in verdicts if v.answer and "venv module" in v.refused]
    if platform.startswith("linux"):
        distribution = os_release() if distribution is None else distribution
        uv = f"or install uv ({UV_INSTALL}) and sessionmem gets its own Python"
        if lacking_venv and any(word in ("debian", "ubuntu") for word in distribution):
            major, minor = lacking_venv[0].version[:2]
            return f"Install its venv module with `sudo apt install python{major}.{minor}-venv` ({uv}){THEN}."
        command = next((LINUX_INSTALL[word] for word in distribution if word in LINUX_INSTALL), "")
        if command:
            return f"Install Python 3.11 or newer with its venv module: {command} ({uv}){THEN}."
        return f"Install your distribution's Python 3.11 or newer with its venv module ({uv}){THEN}."
    if platform == "darwin":
        return ("Install Python 3.13 from https://www.python.org/downloads/macos/ or with `brew install python@3.13` "
                f"(or install uv, `brew install uv`, and sessionmem gets its own Python){THEN}.")
    return f"Install Python 3.13 from https://www.python.org/downloads/ (or install uv){THEN}."
