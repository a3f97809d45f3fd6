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
case "$(uname -s 2>/dev/null)" in MINGW* | MSYS* | CYGWIN*) exit 0 ;; esac
command -v python3 >/dev/null 2>&1 || exit 0
exec python3 -S "${CLAUDE_PLUGIN_ROOT:-$(dirname "$0")/../..}/plugin/bootstrap/run.py" hook "$1"
