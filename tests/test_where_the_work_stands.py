"""What a new session is handed before its first prompt: the last session's open failures and decisions, then
the files the recent sessions worked on most (search/context.py ``where_the_work_stands``)."""

from __future__ import annotations

from sessionmem.records import ObservationRow
from sessionmem.search.context import commands_that_matter, files_that_matter, in_flight, where_the_work_stands

from .conftest import observation_row


def edit(id: int, session: str, path: str) -> ObservationRow:
    return observation_row(id, claude_session_id=session, tool_name="Edit", type="change", title=f"Edited {path}",
                           files_modified=[path])


def read(id: int, session: str, path: str) -> ObservationRow:
    return observation_row(id, claude_session_id=session, title=f"Read {path}", files_read=[path])


def test_the_files_of_the_last_session_come_first_then_those_several_sessions_came_back_to() -> None:
    rows = [  # newest first, as the planner reads them
        edit(9, "last", "src/new.py"),
        read(8, "last", "src/db.py"),
        edit(7, "before", "src/db.py"),
        read(6, "before", "README.md"),
        edit(5, "older", "src/db.py"),
        edit(4, "older", "src/gone.py"),
        edit(3, "older", "src/gone.py"),  # the same session twice: counted once
    ]
    # db.py (three sessions; its line is its newest change, not the newer read), new.py (the last), README
    assert [row.id for row in files_that_matter(rows, files=3)] == [7, 9, 6]


def test_a_files_line_is_its_newest_change_else_its_newest_read() -> None:
    rows = [read(3, "s", "a.py"), edit(2, "s", "a.py"), read(1, "s", "b.py")]
    assert [row.id for row in files_that_matter(rows, files=2)] == [2, 1]


def test_observations_that_name_no_file_are_not_files_that_matter() -> None:
    rows = [observation_row(2, tool_name="Bash", title="Ran make"), read(1, "s", "a.py")]
    assert [row.id for row in files_that_matter(rows, files=5)] == [1]
    assert files_that_matter([], files=5) == []


def test_open_failures_and_decisions_of_the_last_session_are_in_flight() -> None:
    fixed = observation_row(4, claude_session_id="last", tool_name="Bash", title="Tests passed",
                            facts=["command: pytest -q"])
    failed_then_fixed = observation_row(3, claude_session_id="last", tool_name="Bash", type="failure", failed=True,
                                        title="Tests failed", facts=["command: pytest -q"])
    still_failing = observation_row(2, claude_session_id="last", tool_name="Bash", type="failure", failed=True,
                                    title="Build failed", facts=["command: make wheel"])
    declined = observation_row(5, claude_session_id="last", tool_name="Bash", type="decision",
                               title="The user declined to run `rm -rf build`")
    older_failure = observation_row(1, claude_session_id="older", tool_name="Read", type="failure", failed=True,
                                    title="Failed: Read a.py")
    rows = [declined, fixed, failed_then_fixed, still_failing, older_failure]
    assert [row.id for row in in_flight(rows)] == [5, 2]
    assert in_flight([]) == []


def test_a_failure_on_a_file_is_solved_by_a_later_success_on_it() -> None:
    failed = observation_row(1, tool_name="Read", type="failure", failed=True, title="Failed: Read a.py")
    later = observation_row(2, tool_name="Read", title="Read a.py")
    assert in_flight([later, failed]) == []
    assert [row.id for row in in_flight([failed])] == [1]


def test_the_handover_holds_each_observation_once_in_flight_first() -> None:
    failing = observation_row(3, claude_session_id="last", tool_name="Edit", type="failure", failed=True,
                              title="Failed: Edit a.py", files_modified=["a.py"])
    rows = [failing, edit(2, "last", "b.py"), read(1, "last", "a.py")]
    chosen = where_the_work_stands(rows, files=8)
    assert [row.id for row in chosen] == [3, 2]  # the failure on a.py is a.py's line too, once


def run(id: int, session: str, command: str, *, failed: bool = False) -> ObservationRow:
    return observation_row(id, claude_session_id=session, tool_name="Bash", failed=failed,
                           type="failure" if failed else "discovery", title=f"Ran `{command}`",
                           facts=[f"command: {command}", "exit status 0"])


def test_commands_run_in_several_sessions_matter_each_as_its_newest_good_run() -> None:
    rows = [run(6, "last", "make test", failed=True), run(5, "last", "make test"), run(4, "last", "make wheel"),
            run(3, "before", "make test"), run(2, "before", "npm ci"), run(1, "older", "npm ci")]
    assert [row.id for row in commands_that_matter(rows)] == [5, 2]  # make wheel: one session only
    assert commands_that_matter(rows, commands=1) == [rows[1]]


def test_what_the_last_session_did_that_names_no_file_is_in_flight_too() -> None:
    deployed = observation_row(3, claude_session_id="last", tool_name="Bash", type="change", title="Deployed")
    looked = observation_row(2, claude_session_id="last", tool_name="Bash", title="Ran `make check`")  # a discovery
    edited = edit(1, "last", "a.py")  # a file: the files that matter's
    assert [row.id for row in in_flight([deployed, looked, edited])] == [3]
