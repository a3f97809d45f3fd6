# The installed plugin's hook command: sh hook.sh <Stage> (Claude Code sets CLAUDE_PLUGIN_ROOT
# and CLAUDE_PLUGIN_DATA). The fast path, taken by every hook once sessionmem's environment
# is installed from this very plugin copy: exec its interpreter on the hook entry, no
# Python in between. Otherwise run.py decides (starts the install, spools meanwhile).
venv="${CLAUDE_PLUGIN_DATA:-/nonexistent}/venv"
if read -r from 2>/dev/null <"$venv/installed-from" && [ "$from" = "${CLAUDE_PLUGIN_ROOT:-}" ] \
        && read -r entry 2>/dev/null <"$venv/hook-entry" && [ -x "$venv/bin/python" ]; then
    exec "$venv/bin/python" -S "$entry" "$1"
fi
exec python3 -S "${CLAUDE_PLUGIN_ROOT:-$(dirname "$0")/../..}/plugin/bootstrap/run.py" hook "$1"
