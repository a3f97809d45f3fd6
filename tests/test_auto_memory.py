"""``sessionmem doctor`` says whether Claude Code's own auto memory is on for the project, why, and where it is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from sessionmem.protocol.claude_memory import COUNT_LIMIT, auto_memory, project_folder_name


def settings(path: Path, **values: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(values))


def project_and_config(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    project = tmp_path / "work" / "calc.proj"
    project.mkdir(parents=True)
    return project, {"CLAUDE_CONFIG_DIR": str(tmp_path / "claude")}


def test_on_by_default_in_the_projects_folder_named_as_claude_code_names_it(tmp_path: Path) -> None:
    project, env = project_and_config(tmp_path)
    found = auto_memory(project, env, "linux")
    assert found.enabled and found.why == "the default" and found.memory_lines is None
    assert project_folder_name(Path("/work/calc.proj")) == "-work-calc-proj"
    assert found.folder == tmp_path / "claude" / "projects" / project_folder_name(project) / "memory"
    (found.folder).mkdir(parents=True)
    (found.folder / "MEMORY.md").write_text("- use pnpm\n- tests: pnpm test\n")
    assert auto_memory(project, env, "linux").memory_lines == 2


def test_the_first_settings_file_that_says_wins_and_the_variable_wins_over_all(tmp_path: Path) -> None:
    project, env = project_and_config(tmp_path)
    settings(tmp_path / "claude" / "settings.json", autoMemoryEnabled=True)
    settings(project / ".claude" / "settings.json", autoMemoryEnabled=False)
    found = auto_memory(project, env, "linux")
    assert not found.enabled and found.why == f"autoMemoryEnabled false in {project / '.claude' / 'settings.json'}"
    settings(project / ".claude" / "settings.local.json", autoMemoryEnabled=True)
    assert auto_memory(project, env, "linux").enabled
    assert not auto_memory(project, {**env, "CLAUDE_CODE_DISABLE_AUTO_MEMORY": "1"}, "linux").enabled
    forced = auto_memory(project, {**env, "CLAUDE_CODE_DISABLE_AUTO_MEMORY": "0"}, "linux")
    assert forced.enabled and forced.why == "CLAUDE_CODE_DISABLE_AUTO_MEMORY=0"


def test_a_directory_of_its_own_and_a_broken_settings_file(tmp_path: Path) -> None:
    project, env = project_and_config(tmp_path)
    (project / ".claude").mkdir()
    (project / ".claude" / "settings.json").write_text("{not json")  # passed over: Claude Code reports its own
    settings(tmp_path / "claude" / "settings.json", autoMemoryDirectory=str(tmp_path / "notes"))
    found = auto_memory(project, env, "linux")
    assert found.enabled and found.folder == tmp_path / "notes"


def test_a_repository_has_one_memory_whichever_folder_claude_starts_in(tmp_path: Path) -> None:
    project, env = project_and_config(tmp_path)
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    inside = project / "src" / "deep"
    inside.mkdir(parents=True)
    assert auto_memory(inside, env, "linux").folder == auto_memory(project, env, "linux").folder


def test_doctor_reports_it(tmp_path: Path) -> None:
    project, env = project_and_config(tmp_path)
    settings(project / ".claude" / "settings.json", autoMemoryEnabled=False)
    run_env = {key: value for key, value in os.environ.items() if key != "CLAUDE_CODE_DISABLE_AUTO_MEMORY"}
    run_env.update(env, SESSIONMEM_DATA_DIR=str(tmp_path / "data"), SESSIONMEM_PORT="0", HOME=str(tmp_path))
    doctor = subprocess.run([sys.executable, "-m", "sessionmem", "doctor"], capture_output=True, text=True,
                            env=run_env, cwd=project, timeout=120)
    assert (f"[ok] Claude Code's auto memory: off for this project (autoMemoryEnabled false in "
            f"{project / '.claude' / 'settings.json'}); no MEMORY.md yet in ") in doctor.stdout, doctor.stdout
    assert "[ok] CLAUDE.md: none for this project" in doctor.stdout
    (project / "CLAUDE.md").write_text("# calc\n")
    doctor = subprocess.run([sys.executable, "-m", "sessionmem", "doctor"], capture_output=True, text=True,
                            env=run_env, cwd=project, timeout=120)
    assert f"[ok] CLAUDE.md: {project / 'CLAUDE.md'} (the handover leaves out what they" in doctor.stdout, doctor.stdout


def test_memory_md_is_counted_a_chunk_at_a_time_whatever_its_size_or_kind(tmp_path: Path) -> None:
    """A repository's settings may point auto memory at a folder of its choosing: its MEMORY.md may be of any
    size (counted without being held whole), or no file at all (a FIFO would block a read for good)."""
    project, env = project_and_config(tmp_path)
    notes = tmp_path / "notes"
    notes.mkdir()
    settings(project / ".claude" / "settings.json", autoMemoryDirectory=str(notes))
    memory = notes / "MEMORY.md"
    # Lines across the chunks' boundaries (a chunk is 1 MiB), the last one without its newline.
    memory.write_bytes(b"- a note\r\n" * 300_000 + b"- the last")
    assert auto_memory(project, env, "linux").memory_lines == 300_001
    memory.write_bytes(b"")
    assert auto_memory(project, env, "linux").memory_lines == 0
    # Past what is counted (a link to the kernel's page map "holds" 256 GiB): counted that far, and said so.
    memory.write_bytes(b"x\n" * (COUNT_LIMIT // 2 + 5))
    counted = auto_memory(project, env, "linux")
    assert (counted.memory_lines, counted.memory_more) == (COUNT_LIMIT // 2, True)
    assert "MEMORY.md over 8388608 line(s)" in counted.line()
    memory.unlink()
    os.mkfifo(memory)
    assert auto_memory(project, env, "linux").memory_lines is None
