"""Three workers, one team database: after one of them is killed with SIGKILL mid-replay and started
again, every accepted tool use is in PostgreSQL exactly once and on every worker exactly once.

The run is ``bench/team_replay.py`` on the fixtures' transcripts (real worker processes, each with
its own data dir and port, real HTTP, the real PostgreSQL + pgvector of the ``postgres`` fixture),
as the team bench runs on the corpus.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("team-three-workers")]

REPO = Path(__file__).resolve().parent.parent


def test_three_workers_lose_and_duplicate_nothing_when_one_is_killed(tmp_path: Path,
                                                                     team_database_url: str) -> None:
    out = tmp_path / "team.json"
    result = subprocess.run(
        [sys.executable, str(REPO / "bench" / "team_replay.py"), "--database-url", team_database_url,
         "--corpus", str(REPO / "tests" / "fixtures" / "transcripts"), "--work", str(tmp_path / "work"),
         "--kill", "--down-seconds", "1", "--probe-interval", "2", "--probe-timeout", "60",
         "--settle-timeout", "60", "--out", str(out)],
        capture_output=True, text=True, timeout=240)
    assert out.exists(), result.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["faults"][0]["fault"] == "SIGKILL"
    assert report["observations_expected"] > 0
    places = {name: place for name, place in report["places"].items() if name != "settle_seconds"}
    assert set(places) == {"postgres", "machine-0", "machine-1", "machine-2"}
    for name, place in places.items():
        assert (name, place["lost"], place["duplicated"], place["unexpected"]) == (name, 0, 0, 0), place
        assert place["rows"] == report["observations_expected"]
    assert result.returncode == 0, result.stderr[-3000:]
