"""What differs by OS, in one module (``sessionmem.protocol.oskit``): its functions on this machine, with
real processes, files and limits, and the rule that nothing else of sessionmem does what it does.

What only macOS or Windows runs (``F_FULLFSYNC``, ``msvcrt`` locks, ``OpenProcess``) is type-checked for
those platforms by ``make lint`` (``tools/typecheck.py``); the parts of it that are plain Python run here
too: the command line read through ``ps`` (macOS's way), the candidates the open-files limit steps
through, and the hook's deadline as a timer thread (Windows's way).
"""

from __future__ import annotations

import ast
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from sessionmem.protocol import oskit
from sessionmem.protocol.state import INSTANCE_LOCK_FILE, holds_instance_lock, is_sessionmem_process
from tools import layout

REPO = Path(__file__).resolve().parent.parent
# A process that does nothing for a while, and is not sessionmem (-I -S: nothing of ours on its path).
IDLE = [sys.executable, "-I", "-S", "-c",
        "import sys, time; print('ready', flush=True); sys.stdin.read(); time.sleep(60)"]


@contextmanager
def idle_process(*extra: str) -> Iterator[subprocess.Popen[bytes]]:
    """An idle child, started (it said so), that runs until its stdin closes (then a minute more), killed and
    reaped at the end."""
    process = subprocess.Popen([*IDLE, *extra], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert process.stdout is not None and process.stdout.readline() == b"ready\n"
        yield process
    finally:
        process.kill()
        process.wait()


# -- liveness and identity --------------------------------------------------------------


def test_a_running_process_is_alive_and_an_ended_one_is_not() -> None:
    assert oskit.process_alive(os.getpid())
    with idle_process() as process:
        assert oskit.process_alive(process.pid)
        process.kill()
        if sys.platform == "linux":  # exited, not reaped yet: a zombie does not run (macOS cannot tell)
            deadline = time.monotonic() + 30
            while oskit.process_alive(process.pid):
                assert time.monotonic() < deadline, "a killed child still counted as alive"
                time.sleep(0.01)
        process.wait()
        assert not oskit.process_alive(process.pid)
    assert not oskit.process_alive(0) and not oskit.process_alive(-1)  # process groups, not processes


def test_the_command_line_of_a_process_is_read_from_proc_and_from_ps() -> None:
    """Both ways the module reads it: ``/proc`` (Linux) and ``ps`` (macOS, where the old check had no
    ``/proc`` and said every pid was our worker)."""
    with idle_process("marker-7c1f") as process:
        from_proc = oskit.process_command_line(process.pid)
        from_ps = oskit._command_line_from_ps(process.pid)
        assert from_proc is not None and from_proc.endswith("marker-7c1f"), from_proc
        assert from_ps is not None and from_ps.endswith("marker-7c1f"), from_ps
        assert not is_sessionmem_process(process.pid)  # a live pid that is not ours
    assert oskit.process_command_line(process.pid) is None  # gone
    assert oskit._command_line_from_ps(process.pid) is None
    assert is_sessionmem_process(os.getpid()) == ("sessionmem" in " ".join(sys.argv))


def test_a_stale_state_file_naming_another_program_is_not_our_worker(tmp_path: Path) -> None:
    """``sessionmem stop`` signals only a pid that holds the instance lock and runs sessionmem."""
    from sessionmem.protocol.state import WorkerState, verified_worker, write_state

    with idle_process() as process:
        write_state(str(tmp_path), WorkerState(process.pid, "127.0.0.1", 1, 0.0, "0"))
        (tmp_path / INSTANCE_LOCK_FILE).write_text(f"{process.pid}\n")
        assert verified_worker(str(tmp_path)) is None


# -- file locks -------------------------------------------------------------------------

HOLD_LOCK = textwrap.dedent("""\
    import os, sys
    sys.path.insert(0, sys.argv[1])
    from sessionmem.protocol import oskit
    fd = os.open(sys.argv[2], os.O_RDWR | os.O_CREAT, 0o600)
    oskit.lock_file(fd, shared=sys.argv[3] == "shared")
    print("locked", flush=True)
    sys.stdin.read()  # held until the test closes our stdin
""")


@contextmanager
def lock_held_elsewhere(path: Path, *, shared: bool = False) -> Iterator[None]:
    """``path`` locked by another process for the duration of the block."""
    process = subprocess.Popen([sys.executable, "-S", "-c", HOLD_LOCK, str(REPO), str(path),
                                "shared" if shared else "exclusive"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert process.stdout is not None and process.stdout.readline() == b"locked\n"
        yield
    finally:
        assert process.stdin is not None
        process.stdin.close()
        process.wait(timeout=30)


def test_a_lock_held_by_another_process_is_not_taken_until_it_is_released(tmp_path: Path) -> None:
    path = tmp_path / INSTANCE_LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        with lock_held_elsewhere(path):
            assert not oskit.try_lock_file(fd)
            assert not oskit.try_lock_file(fd, shared=True)
            assert holds_instance_lock(str(tmp_path))  # how `status` and `stop` see a starting worker
        assert not holds_instance_lock(str(tmp_path))
        oskit.lock_file(fd)  # released with the other process: taken at once
        oskit.unlock_file(fd)
        with lock_held_elsewhere(path, shared=True):
            assert oskit.try_lock_file(fd, shared=True)  # readers share it
            oskit.unlock_file(fd)
            assert not oskit.try_lock_file(fd)  # a writer waits for them
    finally:
        os.close(fd)


WAITER_HELD_S = 0.3  # how long the lock is held with the other process waiting for it


def test_a_blocking_lock_waits_for_the_other_process(tmp_path: Path) -> None:
    path = tmp_path / "lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    waiter = subprocess.Popen([sys.executable, "-S", "-c", HOLD_LOCK, str(REPO), str(path), "exclusive"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        oskit.lock_file(fd)
        time.sleep(WAITER_HELD_S)  # what must not happen: the waiter taking the lock while it is held
        assert waiter.poll() is None  # still waiting: it has not said "locked"
        os.close(fd)  # closing releases it
        assert waiter.stdout is not None and waiter.stdout.readline() == b"locked\n"
    finally:
        assert waiter.stdin is not None
        waiter.stdin.close()
        waiter.wait(timeout=30)


# -- the open-files limit ---------------------------------------------------------------


def test_the_open_files_limit_is_raised_to_the_hard_limit_when_less_than_asked() -> None:
    """A real setrlimit, in a child whose hard limit is lowered to 1,000: asked for 65,536, it gets 1,000."""
    script = ("import sys; sys.path.insert(0, sys.argv[1]); from sessionmem.protocol import oskit; "
              "oskit.limit_open_files(256, hard=1000); print(oskit.raise_open_files_limit(65536), "
              "oskit.open_files_limit())")
    done = subprocess.run([sys.executable, "-S", "-c", script, str(REPO)], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.split() == ["1000", "1000"]


def test_the_open_files_limit_steps_down_by_halves_never_below_the_current_one() -> None:
    """macOS refuses more than kern.maxfilesperproc (often 10,240 or 24,576) with EINVAL, though its hard
    limit says unlimited: the worker tries 65,536, then half, until one is accepted (the old code asked
    once and stayed at 256)."""
    assert oskit.open_files_candidates(65536, 256, None) == [65536, 32768, 16384, 8192, 4096, 2048, 1024, 512]
    assert oskit.open_files_candidates(65536, 256, 1000) == [1000, 500]
    assert oskit.open_files_candidates(65536, 1024, 1024) == []
    assert oskit.open_files_candidates(100, 256, None) == []


def test_the_worker_raises_its_limit_as_far_as_the_os_lets_it() -> None:
    limit = oskit.open_files_limit()
    assert limit is not None and oskit.raise_open_files_limit(limit) == limit  # nothing to raise: unchanged


# -- process groups and termination -----------------------------------------------------

START_GRANDCHILD = textwrap.dedent("""\
    import subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-I", "-S", "-c", "import time; time.sleep(60)"])
    print(child.pid, flush=True)
    time.sleep(60)
""")


def test_a_new_group_is_killed_whole() -> None:
    leader = subprocess.Popen([sys.executable, "-I", "-S", "-c", START_GRANDCHILD], stdout=subprocess.PIPE,
                              **oskit.new_group_options())
    try:
        assert leader.stdout is not None
        grandchild = int(leader.stdout.readline())
        oskit.kill_process_group(leader.pid)
        assert leader.wait(timeout=30) == -signal.SIGKILL
        deadline = time.monotonic() + 30
        while oskit.process_alive(grandchild):  # killed too (a zombie until init reaps it)
            assert time.monotonic() < deadline, "the group's other process outlived it"
            time.sleep(0.02)
    finally:
        leader.kill()
        leader.wait()


def test_terminate_asks_and_kill_ends() -> None:
    assert oskit.stop_signals() == (signal.SIGTERM, signal.SIGINT)
    with idle_process() as process:
        oskit.terminate_process(process.pid)
        assert process.wait(timeout=30) == -signal.SIGTERM
    with idle_process() as process:
        oskit.kill_process(process.pid)
        assert process.wait(timeout=30) == -signal.SIGKILL
    with pytest.raises(ProcessLookupError):
        oskit.kill_process(process.pid)


# -- durable writes ---------------------------------------------------------------------


def test_a_file_and_its_directory_are_synced(tmp_path: Path) -> None:
    path = tmp_path / "file"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        os.write(fd, b"kept")
        oskit.sync_file(fd)
    finally:
        os.close(fd)
    oskit.sync_directory(str(tmp_path))
    oskit.sync_directory(str(tmp_path / "gone"))  # best effort: never raises
    with pytest.raises(OSError):
        oskit.sync_file(fd)  # closed: the error propagates
    assert path.read_bytes() == b"kept"


def test_the_store_asks_sqlite_for_a_full_sync(tmp_path: Path) -> None:
    """SQLite syncs with plain fsync unless told: ``fullfsync`` makes it use F_FULLFSYNC on macOS (elsewhere
    it changes nothing), on the connection that commits."""
    from sessionmem.storage.sqlite.connection_setup import open_writer

    connection = open_writer(tmp_path / "memory.db")
    try:
        assert connection.execute("PRAGMA fullfsync").fetchall() == [(1,)]
        assert connection.execute("PRAGMA synchronous").fetchall() == [(2,)]  # FULL
    finally:
        connection.close()


# -- the hook's deadline ----------------------------------------------------------------

ARM_AND_HANG = textwrap.dedent("""\
    import sys
    sys.path.insert(0, sys.argv[1])
    from sessionmem.protocol import oskit
    getattr(oskit, sys.argv[2])(0.2)
    sys.stdin.read()  # waits in a system call for input that never comes
    sys.exit(3)
""")


@pytest.mark.parametrize("arm", ["arm_exit_deadline", "_arm_exit_timer_thread"],
                         ids=["interval-timer", "timer-thread"])
def test_the_hook_deadline_ends_the_process_with_status_0(arm: str) -> None:
    """SIGALRM where the OS has it; the timer thread is Windows's way (it runs here too)."""
    hanging = subprocess.Popen([sys.executable, "-S", "-c", ARM_AND_HANG, str(REPO), arm], stdin=subprocess.PIPE)
    try:
        assert hanging.wait(timeout=30) == 0  # long before the test would give up, and not 3
    finally:
        hanging.kill()
        hanging.wait()


def test_the_module_loads_nothing_a_hook_would_pay_for() -> None:
    """Hooks import it on every tool use: at import it loads nothing but itself (a hook has loaded os, sys
    and __future__ by then); ``fcntl``, ``_signal``, ``subprocess``, ``ctypes`` come with the function that
    needs them."""
    script = ("import sys, os, __future__; sys.path.insert(0, sys.argv[1]); before = set(sys.modules); "
              "import sessionmem.protocol.oskit; print(*sorted(set(sys.modules) - before))")
    done = subprocess.run([sys.executable, "-S", "-c", script, str(REPO)], capture_output=True, text=True,
                          timeout=60, check=True)
    assert set(done.stdout.split()) <= {"sessionmem", "sessionmem.protocol", "sessionmem.protocol.oskit"}


# -- the rule: nothing else does what the module does -----------------------------------

MODULE = "sessionmem/protocol/oskit.py"
# Run before sessionmem is installed, by whichever python3 there is: they cannot import the module.
EXCEPTIONS = ("plugin/bootstrap",)
# Modules that exist on one OS only (or, like _signal, bypass the portable `signal`).
OS_ONLY_MODULES = {"fcntl", "resource", "msvcrt", "_signal", "termios", "tty", "pty", "pwd", "grp", "posix", "nt",
                   "_winapi", "winreg"}
# os functions that are POSIX-only, or, like os.kill (TerminateProcess on Windows, for any signal), mean
# something else elsewhere.
OS_CALLS = {"kill", "killpg", "setsid", "getsid", "getpgid", "setpgid", "getpgrp", "setpgrp", "fork", "forkpty"}
# What `signal` has on every OS; any other name (SIGALRM, SIGKILL, setitimer, SIGBREAK...) is one OS's.
PORTABLE_SIGNAL_NAMES = {"SIGABRT", "SIGFPE", "SIGILL", "SIGINT", "SIGSEGV", "SIGTERM", "SIG_DFL", "SIG_IGN", "NSIG",
                         "signal", "getsignal", "set_wakeup_fd", "raise_signal", "default_int_handler", "strsignal",
                         "valid_signals", "Signals", "Handlers"}
POSIX_ONLY_KEYWORDS = {"start_new_session"}  # Popen's: oskit.new_group_options() says it per OS


def scanned_folders(root: Path) -> list[str]:
    """Every folder of the installed package (pyproject's package-dir), tools/, bench/ and plugin/ (but for
    its :data:`EXCEPTIONS`).

    Not tests/: they start, stop and inspect processes as the Linux machine that runs them allows."""
    return sorted({*layout.folders(root), "tools", "bench", "plugin"})


def rule_violations(root: Path) -> list[str]:
    """``path:line: what`` for each use, outside the module, of what only the module may use."""
    found = []
    for folder in scanned_folders(root):
        for path in sorted((root / folder).rglob("*.py")) if (root / folder).is_dir() else []:
            relative = path.relative_to(root).as_posix()
            if relative != MODULE and not relative.startswith(EXCEPTIONS):
                found += [f"{relative}:{line}: {what}" for line, what in _violations(path.read_text(), relative)]
    return found


def _violations(source: str, relative: str) -> Iterator[tuple[int, str]]:
    tree = ast.parse(source, relative)
    aliases = {"os": "os", "signal": "signal"}  # local name -> module, for `import os as _os`
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for name in node.names:
                if name.name.split(".")[0] in OS_ONLY_MODULES:
                    yield node.lineno, f"imports {name.name}"
                if name.name in ("os", "signal"):
                    aliases[name.asname or name.name] = name.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] in OS_ONLY_MODULES:
                yield node.lineno, f"imports from {node.module}"
            for name in node.names:
                if _os_specific(node.module, name.name):
                    yield node.lineno, f"imports {node.module}.{name.name}"
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                and _os_specific(aliases[node.value.id], node.attr)):
            yield node.lineno, f"uses {aliases[node.value.id]}.{node.attr}"
        elif isinstance(node, ast.keyword) and node.arg in POSIX_ONLY_KEYWORDS:
            yield node.value.lineno, f"passes {node.arg}="
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str) and "/proc/" in node.value
              and not relative.startswith("bench/")):  # the benchmarks measure memory and CPU on Linux
            yield node.lineno, "reads /proc"


def _os_specific(module: str, name: str) -> bool:
    if module == "os":
        return name in OS_CALLS
    return module == "signal" and name not in PORTABLE_SIGNAL_NAMES


def test_nothing_but_the_module_uses_what_differs_by_os() -> None:
    assert rule_violations(REPO) == []


def _plant(root: Path, file: str, line: str) -> int:
    """Add ``line`` at the end of ``file`` (a copy under ``root``); returns its line number."""
    target = root / file
    lines = target.read_text().splitlines(keepends=True)
    target.write_text("".join(lines) + line + "\n")
    return len(lines) + 1


@pytest.mark.parametrize(("file", "line", "said"), [
    ("sessionmem/protocol/state.py", "import fcntl", "imports fcntl"),
    ("sessionmem/worker.py", "from resource import getrlimit", "imports from resource"),
    ("hooks/run.py", "import _signal", "imports _signal"),
    ("team/consent.py", "ALIVE = os.kill(1, 0)", "uses os.kill"),
    ("compress/claude_code_backend.py", "KILL = signal.SIGKILL", "uses signal.SIGKILL"),
    ("tools/typecheck.py", "from signal import setitimer", "imports signal.setitimer"),
    ("bench/search_latency.py", "GROUP = subprocess.Popen(['true'], start_new_session=True)",
     "passes start_new_session="),
    ("testing/worker_process.py", "STAT = open('/proc/self/stat').read()", "reads /proc"),
], ids=["fcntl", "resource", "_signal", "os.kill", "SIGKILL", "setitimer", "start_new_session", "proc"])
def test_a_planted_use_is_named_by_file_and_line(tmp_path: Path, file: str, line: str, said: str) -> None:
    """In a checkout of the file and the module (the whole tree is clean: the test above)."""
    root = tmp_path / "checkout"
    for copied in (file, MODULE, "pyproject.toml"):
        (root / copied).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / copied, root / copied)
    assert rule_violations(root) == []
    number = _plant(root, file, line)
    assert rule_violations(root) == [f"{file}:{number}: {said}"]
    _plant(root, MODULE, line)  # the module itself may
    assert rule_violations(root) == [f"{file}:{number}: {said}"]
