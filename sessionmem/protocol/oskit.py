"""Everything that differs by operating system, in one place. Standard library only.

What the worker, its commands, the hooks and the compressor need from the OS, with one
answer per OS (``tests/test_oskit.py`` holds that nothing else of sessionmem imports
``fcntl``, ``resource``, ``msvcrt`` or ``_signal``, or uses a POSIX-only call or signal):

- process liveness and identity: :func:`process_alive`, :func:`process_command_line`;
- users and file modes: :func:`user_id`, :func:`owned_by_this_user`, :func:`set_file_mode`,
  :data:`NO_FOLLOW`;
- file locks: :func:`lock_file`, :func:`try_lock_file`, :func:`unlock_file`;
- the open-files limit: :func:`open_files_limit`, :func:`raise_open_files_limit`,
  :func:`limit_open_files`;
- process groups, and what a child gets: :func:`new_group_options`, :func:`kill_process_group`,
  :func:`pass_fds_options`, :func:`lower_priority`;
- termination: :func:`stop_signals`, :func:`terminate_process`, :func:`kill_process`;
- durable writes: :func:`sync_file`, :func:`sync_directory`;
- the hook's deadline: :func:`arm_exit_deadline`.

What each OS gives:

- Linux: all of it; liveness and identity from ``/proc`` (a zombie is not alive).
- macOS: liveness by signal 0 (a zombie -- exited, not yet reaped -- counts as alive: only
  its parent can tell, and a worker's parent, the hook that started it, has exited, so
  launchd reaps it); identity from ``ps``; :func:`sync_file` asks for ``F_FULLFSYNC``,
  since plain ``fsync`` there may leave the data in the drive's cache; the open-files limit
  steps down from what was asked to what the kernel accepts (it refuses more than
  ``kern.maxfilesperproc`` even when the hard limit says unlimited).
- Windows (not supported natively yet: this module imports and type-checks there so that
  a port has one place to fill): liveness through ``OpenProcess``; no identity
  (:func:`process_command_line` raises :class:`NotImplementedError`); no user ids or file
  modes (a file's access is its folder's ACL); locks through ``msvcrt.locking``, exclusive
  only (a shared lock is taken exclusive); no open-files limit; termination is
  ``TerminateProcess``, a group is killed with ``taskkill /T``; no descriptor passed to a
  child by number, no niceness; no directory sync; the hook's deadline is a timer thread.

The hook process imports this module on every tool use: at import it loads only ``os``
and ``sys``; everything else (``fcntl``, ``_signal``, ``subprocess``, ``ctypes``) is
imported by the function that needs it.

Error handling:
    Each function says what it raises. As a rule, what the OS refuses propagates as
    ``OSError`` (``ProcessLookupError`` for a process that is gone), except where the
    function says it is best effort (:func:`sync_directory`) or answers the question
    itself (:func:`process_alive`, :func:`try_lock_file`).
"""

from __future__ import annotations

import os
import sys

# ``sys.platform`` on Windows itself: its own Python, and Cygwin's and MSYS2's (Git Bash), which run on
# Windows' processes and disks. (hooks/entry.py repeats it, before anything is imported: tested.)
NATIVE_WINDOWS = ("win32", "cygwin", "msys")

TYPE_CHECKING = False  # typing costs a hook ~4 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any

if sys.platform == "win32":
    NO_FOLLOW = os.O_NOINHERIT  # no flag refuses a link there; descriptors stay out of children
else:
    # ``os.open`` flags: refuse a symbolic link as the last part of the path (a file another user planted
    # in place of ours), and keep the descriptor out of children.
    NO_FOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC

# -- processes: liveness and identity -------------------------------------------------


def process_alive(pid: int) -> bool:
    """Whether ``pid`` runs, as a process this user may signal.

    A process of another user counts as not alive: a pid of ours that another user's
    process took over is not ours. On Linux a zombie (exited, not yet reaped by its
    parent) does not run; on macOS it counts as running (see the module docstring).
    Never raises.
    """
    if pid <= 0:
        return False  # 0 and negative pids name process groups to os.kill, not a process
    if sys.platform == "win32":
        return _windows_process_alive(pid)
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True  # no /proc (macOS): the signal check says it runs


def _windows_process_alive(pid: int) -> bool:
    if sys.platform != "win32":
        raise NotImplementedError("Windows only")
    import ctypes

    query_limited_information, still_active = 0x1000, 259
    kernel32 = ctypes.windll.kernel32
    handle = kernel32.OpenProcess(query_limited_information, False, pid)
    if not handle:
        return False  # gone, or not ours to open
    try:
        code = ctypes.c_ulong()
        return bool(kernel32.GetExitCodeProcess(handle, ctypes.byref(code))) and code.value == still_active
    finally:
        kernel32.CloseHandle(handle)


def process_command_line(pid: int) -> str | None:
    """The command line ``pid`` runs (its arguments joined by spaces), or ``None`` if it is gone or unreadable.

    From ``/proc/<pid>/cmdline`` where there is one (Linux), else from ``ps -ww -o command= -p``
    (macOS and the BSDs; a process of its own, so never on a hook's path). A zombie's is ``""``
    on Linux. Raises :class:`NotImplementedError` on Windows, where no way to read another
    process's command line is built yet: the caller decides what to assume, and says so.
    """
    if sys.platform == "win32":
        raise NotImplementedError("reading another process's command line is not built for Windows")
    if os.path.exists("/proc/self/cmdline"):
        return _command_line_from_proc(pid)
    return _command_line_from_ps(pid)


def _command_line_from_proc(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return raw.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")


def _command_line_from_ps(pid: int) -> str | None:
    import subprocess

    try:
        done = subprocess.run(["ps", "-ww", "-o", "command=", "-p", str(pid)], stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    line = done.stdout.decode("utf-8", "replace").strip()
    return line if done.returncode == 0 and line else None


# -- users and file modes -------------------------------------------------------------


def user_id() -> int | None:
    """This process's effective user id; ``None`` on Windows, which has none (a SID is no number)."""
    if sys.platform == "win32":
        return None
    return os.geteuid()


def real_home() -> str:
    """This user's home as the system's user database has it, not as ``$HOME`` says (a session may choose that);
    ``""`` on Windows, or for a user the database does not know (a container's)."""
    if sys.platform == "win32":
        return ""
    import pwd

    try:
        return os.path.realpath(pwd.getpwuid(os.geteuid()).pw_dir)
    except KeyError:
        return ""


def owned_by_this_user(info: os.stat_result) -> bool:
    """Whether the file ``info`` describes (``os.stat``) belongs to this process's user. Always ``True`` on
    Windows, where ``st_uid`` is 0 for every file: access there is the folder's ACL, not checked here."""
    if sys.platform == "win32":
        return True
    return info.st_uid == os.geteuid()


def set_file_mode(fd: int, mode: int) -> None:
    """Set the permission bits of the open file ``fd`` (``fchmod``); nothing on Windows, whose modes are
    only read-only or not. Raises ``OSError`` as ``fchmod`` does."""
    if sys.platform == "win32":
        return
    os.fchmod(fd, mode)


# -- file locks -----------------------------------------------------------------------


def lock_file(fd: int, *, shared: bool = False) -> None:
    """Lock the open file ``fd``, waiting while another process holds it; released by :func:`unlock_file`
    or by closing ``fd``.

    ``flock`` on POSIX (``shared``: readers share it, a writer's exclusive lock excludes them).
    On Windows ``msvcrt.locking`` on its first byte, always exclusive, and it moves ``fd``'s
    position to the start. Raises ``OSError`` if the file system cannot lock.
    """
    if sys.platform == "win32":
        import msvcrt

        os.lseek(fd, 0, os.SEEK_SET)
        while True:
            try:
                msvcrt.locking(fd, msvcrt.LK_LOCK, 1)
                return
            except OSError as exc:
                if exc.errno != 36:  # EDEADLOCK: it tried for about 10 s; anything else is an error
                    raise
    else:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)


def try_lock_file(fd: int, *, shared: bool = False) -> bool:
    """Lock ``fd`` as :func:`lock_file` does if no other process holds it; ``False`` (not locked) if one does."""
    if sys.platform == "win32":
        import msvcrt

        os.lseek(fd, 0, os.SEEK_SET)
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    import fcntl

    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def unlock_file(fd: int) -> None:
    """Release this process's lock on ``fd`` (closing ``fd`` releases it too)."""
    if sys.platform == "win32":
        import msvcrt

        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
    else:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_UN)


# -- the open-files limit -------------------------------------------------------------


def open_files_limit() -> int | None:
    """How many files this process may have open (its soft limit); ``None`` where the OS sets no such
    limit per process (Windows: sockets and files are handles, limited only by memory)."""
    if sys.platform == "win32":
        return None
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft


def open_files_candidates(wanted: int, soft: int, hard: int | None) -> list[int]:
    """The soft limits :func:`raise_open_files_limit` tries, in order: ``wanted`` (or the hard limit, if
    lower; ``None``: unlimited), then half of it, and so on, each above ``soft``."""
    candidates = []
    value = wanted if hard is None else min(wanted, hard)
    while value > soft:
        candidates.append(value)
        value //= 2
    return candidates


def raise_open_files_limit(wanted: int) -> int | None:
    """Raise this process's open-files limit toward ``wanted``, stepping down to what the OS grants;
    returns the limit now (``None`` where there is none: Windows).

    Tries ``wanted`` (or the hard limit, if lower), then halves it until the OS accepts one,
    never going below the limit it already had: macOS refuses a value above
    ``kern.maxfilesperproc`` with ``EINVAL`` even when the hard limit says unlimited, and
    then 65,536 asked gives 8,192 rather than the 256 it started with. Never raises.
    """
    if sys.platform == "win32":
        return None
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return None
    for value in open_files_candidates(wanted, soft, None if hard == resource.RLIM_INFINITY else hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (value, hard))
        except (ValueError, OSError):
            continue
        return value
    return soft


def limit_open_files(limit: int, *, hard: int | None = None) -> None:
    """Lower this process's open-files limit to ``limit``, and its hard limit to ``hard`` (default: ``limit``),
    as a small system would (tests). Raises ``ValueError`` or ``OSError`` if the OS refuses;
    ``NotImplementedError`` on Windows."""
    if sys.platform == "win32":
        raise NotImplementedError("Windows has no per-process open-files limit")
    import resource

    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit if hard is None else hard))


# -- process groups and termination ---------------------------------------------------


def new_group_options() -> dict[str, Any]:
    """The ``subprocess.Popen`` keyword arguments that start a child as the leader of a process group of
    its own, which outlives its parent and which :func:`kill_process_group` ends whole.

    POSIX: a new session (``start_new_session``: a new group, no controlling terminal, so a
    Ctrl-C in the parent's terminal does not reach it). Windows: ``CREATE_NEW_PROCESS_GROUP``.
    """
    if sys.platform == "win32":
        import subprocess

        return {"creationflags": subprocess.CREATE_NEW_PROCESS_GROUP}
    return {"start_new_session": True}


def pass_fds_options(fds: tuple[int, ...]) -> dict[str, Any]:
    """The ``subprocess.Popen`` keyword arguments that keep the descriptors ``fds`` open, under their own
    numbers, in the child. Raises :class:`NotImplementedError` on Windows, where a child gets handles,
    not descriptors (a port would pass a handle list)."""
    if sys.platform == "win32":
        raise NotImplementedError("passing descriptors to a child by number is POSIX only")
    return {"pass_fds": fds}


def lower_priority(niceness: int) -> None:
    """Make this process at least ``niceness`` nice (``os.nice``; never less nice than it is): it yields
    the CPU to the worker's own threads. Nothing on Windows (no niceness there)."""
    if sys.platform == "win32":
        return
    os.nice(max(0, niceness - os.nice(0)))


def kill_process_group(pgid: int) -> None:
    """Kill every process of group ``pgid`` at once (``0``: this process's own group, this process included).

    POSIX: SIGKILL to the group. Windows: ``taskkill /F /T`` on the group's leader (``pgid`` is
    its pid), which ends it and the processes it started. Raises ``ProcessLookupError`` if the
    group is gone (POSIX), ``PermissionError`` if it is not ours.
    """
    if sys.platform == "win32":
        import subprocess

        leader = os.getpid() if pgid == 0 else pgid
        subprocess.run(["taskkill", "/F", "/T", "/PID", str(leader)], stdin=subprocess.DEVNULL,
                       capture_output=True, check=False)
        return
    import signal

    os.killpg(pgid, signal.SIGKILL)


def stop_signals() -> tuple[int, ...]:
    """The signals a worker stops on (gracefully, within its shutdown budget).

    POSIX: SIGTERM (what :func:`terminate_process`, ``sessionmem stop`` and service managers
    send) and SIGINT (Ctrl-C). Windows: SIGINT and SIGBREAK (Ctrl-C and Ctrl-Break): it has
    no signal another process can send to stop one gracefully.
    """
    import signal

    if sys.platform == "win32":
        return (signal.SIGINT, signal.SIGBREAK)
    return (signal.SIGTERM, signal.SIGINT)


def terminate_process(pid: int) -> None:
    """Ask ``pid`` to stop: SIGTERM on POSIX (a worker then shuts down within its budget);
    ``TerminateProcess`` on Windows, which ends it at once.

    Raises ``ProcessLookupError`` if it is gone, ``PermissionError`` if it is not ours."""
    import signal

    os.kill(pid, signal.SIGTERM)


def kill_process(pid: int) -> None:
    """End ``pid`` at once, without its clean-up: SIGKILL on POSIX, ``TerminateProcess`` on Windows.

    Raises ``ProcessLookupError`` if it is gone, ``PermissionError`` if it is not ours."""
    import signal

    if sys.platform == "win32":
        os.kill(pid, signal.SIGTERM)  # any signal but the two console events is TerminateProcess
    else:
        os.kill(pid, signal.SIGKILL)


# -- durable writes -------------------------------------------------------------------


def sync_file(fd: int) -> None:
    """Make what was written to ``fd`` survive a crash of the machine or a power cut, before returning.

    ``fsync``, except on macOS, where ``fsync`` hands the data to the drive, which may keep it
    in its cache: there ``F_FULLFSYNC`` asks the drive to write it through, and ``fsync`` is
    the fallback on a file system that refuses that (network and FAT volumes may). Raises
    ``OSError`` if the data could not be written.
    """
    if sys.platform == "darwin":
        import fcntl

        try:
            fcntl.fcntl(fd, fcntl.F_FULLFSYNC)
            return
        except OSError:
            pass
    os.fsync(fd)


def sync_directory(path: str) -> None:
    """Make the names in directory ``path`` (a file just created in it or renamed into it) survive a crash
    of the machine, as :func:`sync_file` does for a file's bytes.

    Best effort, never raises: a file system that cannot sync a directory is left to its own
    ordering, and Windows cannot open a directory at all (NTFS orders a rename after the data
    it names by its own journal).
    """
    if sys.platform == "win32":
        return
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        sync_file(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# -- the hook's deadline --------------------------------------------------------------


def arm_exit_deadline(seconds: float) -> None:
    """End this process with status 0 after ``seconds``, whatever it is doing then (a hook fails open).

    A real-time interval timer (SIGALRM) where the OS has one: the process ends even while
    its main thread waits in a system call. Elsewhere (Windows) a daemon timer thread calls
    ``os._exit(0)``. Call it once per process.
    """
    if sys.platform == "win32":
        _arm_exit_timer_thread(seconds)
        return
    import _signal  # not `signal`: its enum wrappers cost a hook ~2 ms

    _signal.signal(_signal.SIGALRM, _exit_now)
    _signal.setitimer(_signal.ITIMER_REAL, seconds)


def _exit_now(*_: object) -> None:
    os._exit(0)


def _arm_exit_timer_thread(seconds: float) -> None:
    """The deadline where there is no SIGALRM (also run on POSIX by the tests)."""
    import threading

    timer = threading.Timer(seconds, os._exit, (0,))
    timer.daemon = True
    timer.start()
