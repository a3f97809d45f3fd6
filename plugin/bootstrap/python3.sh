# Sourced by hook.sh and mcp.sh (POSIX sh), on their slow path: whether this shell can run the bootstrap.
# Sets `system` (uname -s). native_windows: Git Bash, MSYS2 or Cygwin on Windows, where sessionmem does not
# run (only inside WSL 2). usable_python3: a python3 to run run.py -- not a missing one, and not, on a Mac
# without the Command Line Tools, /usr/bin/python3, a stub that opens an installer dialog.
system="$(uname -s 2>/dev/null)"
native_windows() {
    case "$system" in MINGW* | MSYS* | CYGWIN*) return 0 ;; esac
    return 1
}
usable_python3() {
    command -v python3 >/dev/null 2>&1 || return 1
    if [ "$system" = Darwin ] && [ "$(command -v python3)" = /usr/bin/python3 ] && ! xcode-select -p >/dev/null 2>&1
    then
        return 1
    fi
    return 0
}
