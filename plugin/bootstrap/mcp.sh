# The installed plugin's MCP server command: sh mcp.sh (Claude Code sets CLAUDE_PLUGIN_ROOT and
# CLAUDE_PLUGIN_DATA). run.py execs the plugin environment's sessionmem MCP server; where there is no
# python3 to run it, or on native Windows, this says why on stderr (Claude Code shows it with the
# server's status) and exits 1, rather than starting a Mac's installer dialog at every session.
here="${0%/*}"  # this script's folder (sh runs it by its path)
. "$here/python3.sh"
if [ "${OS:-}" = Windows_NT ] || native_windows; then
    echo "sessionmem: native Windows is not supported; run Claude Code inside WSL 2" >&2
    exit 1
fi
if ! usable_python3; then
    echo "sessionmem: needs Python 3.11 or newer, and this machine has no python3" >&2
    exit 1
fi
exec python3 -S "$here/run.py" mcp
