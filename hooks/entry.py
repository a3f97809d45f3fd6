"""Fast entry point for hook commands: ``python -S <this file> <Stage>``.

``-S`` skips ``site`` and, with it, the ~13 ms the editable-install finder costs on
every start; a hook process only needs the standard library, ``sessionmem.hooks`` and
``sessionmem.protocol``. This file registers those packages from the files beside it
-- a source checkout (``<repo>/hooks`` and ``<repo>/sessionmem``) or an installed
package (``site-packages/sessionmem/hooks``) -- without running
``sessionmem/__init__.py``, then runs :func:`sessionmem.hooks.run.main`.

On native Windows (``sys.platform`` one of
:data:`sessionmem.protocol.oskit.NATIVE_WINDOWS`) the hook exits 0 at once,
before anything else: sessionmem runs there inside WSL 2 only.

Error handling:
    If even this bootstrap fails, the hook still exits 0 with nothing on stdout.
"""

import sys

# A project's session may set PYTHONPATH for its hooks (a committed `.claude/settings.json` has an `env`
# block), and a hook runs in the project's folder: a `subprocess.py` there would run as the hook. Only the
# standard library's own folders are kept, before the first import that could be found elsewhere.
_STDLIB = tuple(root.rstrip("/\\") for root in {sys.base_prefix, sys.base_exec_prefix} if root)
sys.path[:] = [path for path in sys.path if any(path == root or path.startswith((root + "/", root + "\\"))
                                                 for root in _STDLIB)]

import os  # noqa: E402 -- after the path is cut: frozen in a release build, found on the path in a debug one


def _bootstrap() -> None:
    here = os.path.dirname(os.path.abspath(__file__))  # (this folder is off the path: see _STDLIB)
    if "sessionmem" in sys.modules:
        return
    parent = os.path.dirname(here)
    source_package = os.path.join(parent, "sessionmem")
    package_dir = source_package if os.path.isdir(os.path.join(source_package, "protocol")) else parent
    module = type(sys)  # types.ModuleType, without importing types (~0.5 ms)
    package = module("sessionmem")
    package.__path__ = [package_dir]
    hooks = module("sessionmem.hooks")
    hooks.__path__ = [here]
    setattr(package, "hooks", hooks)  # noqa: B010 -- a ModuleType has no declared `hooks`
    sys.modules["sessionmem"] = package
    sys.modules["sessionmem.hooks"] = hooks


def _exit_at_once(status: int) -> None:
    """Exit without the interpreter's tear-down: 3-4 ms, a sixth of a tool-use hook's wall time (bench/hook_ab.py).

    Safe because nothing is left to it: the hook writes its files through descriptors it
    closes (``datadir.write_private``) or ``with`` blocks, registers no ``atexit`` work, and
    a worker it started is detached already. Only the standard streams are buffered.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # a reader gone (EPIPE): nothing more can be said to it
            pass
    os._exit(status)


if __name__ == "__main__":
    if sys.platform in ("win32", "cygwin", "msys"):  # native Windows: not supported, nothing to do, no error
        raise SystemExit(0)
    try:
        _bootstrap()
        from sessionmem.hooks.run import main
    except BaseException:  # fail open, even here
        raise SystemExit(0) from None
    try:
        status = main()
    except BaseException:  # fail open: main() says what went wrong in hooks.log; here it can only end
        status = 0
    _exit_at_once(status)
