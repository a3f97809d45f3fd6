# The installed plugin's hook command: sh hook.sh <Stage> (Claude Code sets CLAUDE_PLUGIN_ROOT
# and CLAUDE_PLUGIN_DATA). The fast path, taken by every hook once sessionmem's environment
# is installed from this very plugin copy: exec its interpreter on the hook entry, no
# Python in between. Otherwise run.py decides (starts the install, spools meanwhile).
# Native Windows (Git Bash, MSYS2, Cygwin) is not supported (sessionmem runs inside WSL 2), and
# without python3 nothing can run: exit 0 at once, so Claude Code shows no hook error. Windows
# sets OS=Windows_NT for every process and WSL does not pass it on: no process is started here.
[ "${OS:-}" = Windows_NT ] && exit 0
venv="${CLAUDE_PLUGIN_DATA:-/nonexistent}/venv"
if read -r from 2>/dev/null <"$venv/installed-from" && [ "$from" = "${CLAUDE_PLUGIN_ROOT:-}" ] \
        && read -r entry 2>/dev/null <"$venv/hook-entry" && [ -x "$venv/bin/python" ]; then
    exec "$venv/bin/python" -S "$entry" "$1"
fi
bootstrap="${0%/*}"  # this script's folder (sh runs it by its path)
. "$bootstrap/python3.sh"
native_windows && exit 0
# No python3 to run the bootstrap (python3.sh says which does not count): exit 0, and at SessionStart
# say once what to install.
if ! usable_python3; then
    shown="${CLAUDE_PLUGIN_DATA:-}/python-missing.shown"
    if [ "$1" = SessionStart ] && [ -n "${CLAUDE_PLUGIN_DATA:-}" ] && [ ! -e "$shown" ] \
            && mkdir -p "$CLAUDE_PLUGIN_DATA" 2>/dev/null && : >"$shown" 2>/dev/null; then
        if [ "$system" = Darwin ]; then
            how='from https://www.python.org/downloads/macos/ or with `brew install python@3.13`'
        else
            how="with your distribution's packages (python3 and python3-venv)"
        fi
        printf '{"systemMessage": "sessionmem needs Python 3.11 or newer, and this machine has no python3: install it %s; memory starts with the next session."}\n' "$how"
    fi
    exit 0
fi
exec python3 -S "$bootstrap/run.py" hook "$1"
