"""Tolerant parsing of the model's XML."""

from __future__ import annotations

from sessionmem.compress.xml_reply import parse_observations, parse_summary


def test_well_formed_blocks_with_indexes() -> None:
    text = """Here you go:
<observation index="2"><type>bugfix</type><title>Guard divide() &amp; test it</title>
<facts><fact>b == 0 raises</fact><fact>uses ZeroDivisionError</fact></facts>
<files_modified><file>calc.py</file></files_modified></observation>
<observation index="1"><type>discovery</type><title>Read calc.py</title></observation>"""
    parsed = parse_observations(text)
    assert [(p["index"], p["type"], p["title"]) for p in parsed] == [
        (2, "bugfix", "Guard divide() & test it"), (1, "discovery", "Read calc.py")]
    assert parsed[0]["facts"] == ("b == 0 raises", "uses ZeroDivisionError")
    assert parsed[0]["files_modified"] == ("calc.py",)
    assert parsed[1]["facts"] == ()


def test_unusable_blocks_are_not_counted() -> None:
    text = ("<observation><type>nonsense</type><title>x</title></observation>"
            "<observation><type>change</type></observation>"
            "<observation><type>Change</type><title>ok</title><facts>- a\n- b</facts></observation>"
            "<observation><type>change</type><title>never closed")
    parsed = parse_observations(text)
    assert [(p["index"], p["type"], p["title"], p["facts"]) for p in parsed] == [(None, "change", "ok", ("a", "b"))]


def test_summary() -> None:
    fields = parse_summary("<summary><request>Fix it</request><completed>Fixed &lt;b&gt;</completed>"
                           "<next_steps>ship</next_steps></summary>")
    assert fields == {"request": "Fix it", "investigated": "", "learned": "", "completed": "Fixed <b>",
                      "next_steps": "ship", "notes": ""}
    assert parse_summary("no summary") is None
    assert parse_summary("<summary><notes>only notes</notes></summary>") is None
