"""Paths of this machine are rewritten out of what leaves it for the team database (storage/local_paths.py)."""

from __future__ import annotations

import pytest

from sessionmem.storage.export_records import ObservationRecord, PromptRecord, SessionRecord, SummaryRecord
from sessionmem.storage.local_paths import without_local_paths, without_local_paths_in

CWD = "/home/ann/src/shop"
HOME = "/home/ann"


@pytest.mark.parametrize(("text", "expected"), [
    ("/home/ann/src/shop/cart.py", "cart.py"),
    ("cd /home/ann/src/shop && make", "cd . && make"),
    ("cd /home/ann/src/shop/ && make", "cd ./ && make"),
    ("`/home/ann/src/shop`", "`.`"),
    ("edited /home/ann/src/shop/src/a.py and /home/ann/src/shop/b.py", "edited src/a.py and b.py"),
    ("/home/ann/src/shop-old/x.py", "~/src/shop-old/x.py"),  # another directory: only the home goes
    ("cat /home/ann/.aws/config", "cat ~/.aws/config"),
    ("cd /home/ann", "cd ~"),
    ("/home/anna/notes.txt", "/home/anna/notes.txt"),  # another user's home, not a prefix of ours
    ("/mnt/home/ann/src/shop/x", "/mnt/home/ann/src/shop/x"),  # not our path: a longer one ending alike
    ("file:///home/ann/src/shop/x.py", "file://x.py"),  # "//home" is "/home" to POSIX
    ("no paths at all", "no paths at all"),
])
def test_paths_under_the_session_and_the_home_directory_are_rewritten(text: str, expected: str) -> None:
    assert without_local_paths_in(text, cwd=CWD, home=HOME) == expected


def test_nothing_is_taken_for_the_root_or_a_relative_directory() -> None:
    assert without_local_paths_in("/etc/hosts and /tmp/x", cwd="/", home="") == "/etc/hosts and /tmp/x"
    assert without_local_paths_in("src/a.py", cwd="src", home=None) == "src/a.py"
    assert without_local_paths_in("/root/x", cwd=None, home="/root/") == "~/x"


def test_every_text_of_every_record_and_no_identity() -> None:
    observation = ObservationRecord(
        claude_session_id="s", project="shop", prompt_number=1, tool_name="Read", tool_use_id="t",
        type="discovery", title=f"Read {CWD}/cart.py", created_at=1.0, subtitle=f"in {CWD}",
        facts=[f"command: cd {CWD} && pytest", "exit status 0"], narrative=f"ran in {HOME}/tmp",
        concepts=["how-it-works"], files_read=[f"{CWD}/cart.py"], files_modified=[f"{HOME}/.bashrc"])
    cleaned = without_local_paths(observation, cwd=CWD, home=HOME)
    assert isinstance(cleaned, ObservationRecord)
    assert (cleaned.title, cleaned.subtitle, cleaned.facts, cleaned.narrative, cleaned.files_read,
            cleaned.files_modified) == ("Read cart.py", "in .", ["command: cd . && pytest", "exit status 0"],
                                        "ran in ~/tmp", ["cart.py"], ["~/.bashrc"])
    assert (cleaned.claude_session_id, cleaned.tool_use_id, cleaned.project) == ("s", "t", "shop")
    summary = SummaryRecord(claude_session_id="s", project="shop", prompt_number=1, created_at=1.0,
                            request=f"fix {CWD}/cart.py", completed=f"{CWD}/cart.py fixed", notes=HOME)
    cleaned_summary = without_local_paths(summary, cwd=CWD, home=HOME)
    assert isinstance(cleaned_summary, SummaryRecord)
    assert (cleaned_summary.request, cleaned_summary.completed, cleaned_summary.notes) == (
        "fix cart.py", "cart.py fixed", "~")
    prompt = without_local_paths(PromptRecord("s", 1, f"look at {CWD}/cart.py", 1.0), cwd=CWD, home=HOME)
    assert isinstance(prompt, PromptRecord) and prompt.text == "look at cart.py"
    session = SessionRecord(claude_session_id="s", project="shop", first_prompt=f"open {CWD}")
    cleaned_session = without_local_paths(session, cwd=CWD, home=HOME)
    assert isinstance(cleaned_session, SessionRecord) and cleaned_session.first_prompt == "open ."
    untouched = SessionRecord(claude_session_id="s", project="shop", first_prompt="nothing local")
    assert without_local_paths(untouched, cwd=CWD, home=HOME) is untouched
