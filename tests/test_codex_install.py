"""``sessionmem install --agent codex``, ``uninstall`` and ``doctor``, against the real Codex CLI (pinned in e2e/).

Codex is asked what it sees (its app server's ``hooks/list`` and ``config/read``), never
read around: whether it trusts a hook is Codex's own verdict on its own hash.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from sessionmem.agents.codex import STAGES, CodexWiring, wiring
from sessionmem.agents.codex_app_server import CodexAppServer, ListedHook
from sessionmem.cli import main
from sessionmem.install import MARKER, hook_command

# One Codex app server at a time is plenty on two cores.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("codex")]

REPO = Path(__file__).resolve().parent.parent
CODEX = str(REPO / "e2e" / "node_modules" / ".bin" / "codex")
USER_CONFIG = '# my settings\nmodel = "gpt-test"  # kept as written\n'


@pytest.fixture
def codex_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "codex-home"
    home.mkdir()
    (home / "config.toml").write_text(USER_CONFIG)
    monkeypatch.setenv("CODEX_HOME", str(home))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PATH", f"{Path(CODEX).parent}{os.pathsep}{os.environ['PATH']}")  # doctor asks `codex`
    monkeypatch.chdir(tmp_path)
    return home


def _hooks_codex_lists(home: Path, cwd: Path) -> list[ListedHook]:
    with CodexAppServer(CODEX, env=dict(os.environ, CODEX_HOME=str(home))) as app:
        return app.hooks(str(cwd))


def _install(*extra: str) -> int:
    return main(["install", "--agent", "codex", "--codex", CODEX, *extra])


def test_install_writes_the_hooks_codex_trusts_them_and_the_mcp_server(codex_home: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert _install() == 0
    out = capsys.readouterr().out
    assert f"Codex trusts the {len(STAGES)} sessionmem hooks" in out

    written = json.loads((codex_home / "hooks.json").read_text())["hooks"]
    assert set(written) == set(STAGES)
    commands = [hook["command"] for groups in written.values() for group in groups for hook in group["hooks"]]
    assert all(command.endswith(f" codex {MARKER}") for command in commands)

    listed = _hooks_codex_lists(codex_home, codex_home.parent)
    ours = [hook for hook in listed if (hook.command or "").endswith(MARKER)]
    assert len(ours) == len(STAGES) and {hook.trust_status for hook in ours} == {"trusted"}
    config = (codex_home / "config.toml").read_text()
    assert config.startswith(USER_CONFIG)  # the user's lines, comments and all, as they were
    assert "[mcp_servers.sessionmem]" in config and sys.executable in config

    # Again: nothing to change, so nothing written and no new backup. (Codex's own databases beside them come
    # and go with its app server's checkpoints: they are not ours to compare.)
    before = _what_install_writes(codex_home)
    assert _install() == 0
    assert _what_install_writes(codex_home) == before


def _what_install_writes(home: Path) -> dict[str, tuple[int, bytes]]:
    """The files install writes or backs up in Codex's home, each with its modification time and bytes."""
    ours = [home / "hooks.json", home / "config.toml", *home.glob("*.sessionmem-backup-*")]
    return {path.name: (path.stat().st_mtime_ns, path.read_bytes()) for path in ours if path.exists()}


def test_a_repository_cannot_get_its_hooks_trusted_by_looking_like_sessionmem(codex_home: Path, tmp_path: Path) -> None:
    """A cloned repository's .codex/hooks.json with sessionmem's very command is Codex's project layer: install
    trusts only the user's hook file it wrote."""
    project = tmp_path / "cloned"
    (project / ".codex").mkdir(parents=True)
    (project / ".git").mkdir()
    lookalike = {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": hook_command("Stop", agent="codex"),
                                                "timeout": 5}]}]}}
    (project / ".codex" / "hooks.json").write_text(json.dumps(lookalike))
    # The user trusts the project itself (Codex loads a project's hooks only then).
    with (codex_home / "config.toml").open("a") as config:
        config.write(f'\n[projects."{project}"]\ntrust_level = "trusted"\n')
    assert _install() == 0
    listed = _hooks_codex_lists(codex_home, project)
    from_project = [hook for hook in listed if hook.source == "project"]
    assert from_project, "Codex should list the project's hook (else this test proves nothing)"
    assert {hook.trust_status for hook in from_project} == {"untrusted"}


def test_doctor_sees_a_hook_codex_no_longer_trusts(codex_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _install() == 0
    found = wiring(CODEX)
    assert isinstance(found, CodexWiring) and found.trusted == set(STAGES) and not found.untrusted
    # The user (or an update) changes one definition: Codex stops running it until trusted again.
    hooks_file = codex_home / "hooks.json"
    written = json.loads(hooks_file.read_text())
    written["hooks"]["Stop"][0]["hooks"][0]["timeout"] = 7
    hooks_file.write_text(json.dumps(written))
    capsys.readouterr()
    main(["doctor"])
    out = capsys.readouterr().out
    assert "[!!] Codex does not run sessionmem's Stop hook(s): not trusted" in out, out
    assert _install() == 0  # install again: the definition as written now, trusted again
    assert wiring(CODEX).trusted == set(STAGES)


def test_without_trust_install_says_exactly_what_to_do(codex_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _install("--no-trust") == 1
    err = capsys.readouterr().err
    assert "type /hooks and trust them" in err
    assert wiring(CODEX).trusted == set()


def test_uninstall_removes_exactly_what_install_added(codex_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hooks_file = codex_home / "hooks.json"
    theirs = {"type": "command", "command": "echo theirs", "timeout": 3}
    hooks_file.write_text(json.dumps({"hooks": {"Stop": [{"hooks": [theirs]}]}}))
    assert _install() == 0
    assert main(["uninstall", "--agent", "codex", "--codex", CODEX]) == 0
    assert json.loads(hooks_file.read_text()) == {"hooks": {"Stop": [{"hooks": [theirs]}]}}
    config = (codex_home / "config.toml").read_text()
    assert config.startswith(USER_CONFIG)
    assert "mcp_servers.sessionmem" not in config and "trusted_hash" not in config
    assert list(codex_home.glob("hooks.json.sessionmem-backup-*")), "a backup of each change is kept"


def test_an_mcp_server_of_our_name_that_is_not_ours_is_left_alone(codex_home: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    with (codex_home / "config.toml").open("a") as config:
        config.write('\n[mcp_servers.sessionmem]\ncommand = "/opt/other/server"\n')
    assert _install() == 1
    assert "not sessionmem's; left as it is" in capsys.readouterr().err
    assert main(["uninstall", "--agent", "codex", "--codex", CODEX]) == 0
    assert '/opt/other/server' in (codex_home / "config.toml").read_text()
