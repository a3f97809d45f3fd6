"""Linear-time removal of <private> and <sessionmem-context> spans."""

from __future__ import annotations

import pytest

from sessionmem.protocol.privacy import MAX_TAGS, strip_private, strip_private_deep


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("no tags here", "no tags here"),
        ("keep <private>secret</private> this", "keep  this"),
        ("<private>a</private>b<private>c</private>", "b"),
        ("x <sessionmem-context>old memory</sessionmem-context> y", "x  y"),
        ("mixed <private>p</private> and <sessionmem-context>c</sessionmem-context>.", "mixed  and ."),
        ("before <private>unterminated secret and everything after", "before"),
        ("a </private> stray close is text", "a </private> stray close is text"),
        ("<private>only</private>", ""),
        ("<PRIVATE>case</PRIVATE> matters", "<PRIVATE>case</PRIVATE> matters"),
        ("nested <private>a <private>b</private> c</private> d", "nested  d"),
        ("nested but <private>a <private>b</private> never closed", "nested but"),
    ],
)
def test_strip_private(text: str, expected: str) -> None:
    assert strip_private(text) == expected


def test_too_many_tags_hide_the_whole_field() -> None:
    allowed = "ok " + "<private>x</private>" * MAX_TAGS
    assert strip_private(allowed) == "ok"
    assert strip_private(allowed + "<private>y</private> tail") == ""


def test_many_far_apart_tags_of_two_kinds() -> None:
    # One tag kind far from the other: each is searched again only once passed.
    text = ("<private>s</private>" + "a" * 1000) * 50 + "<sessionmem-context>c</sessionmem-context>end"
    result = strip_private(text)
    assert result.endswith("end") and "s" not in result.replace("end", "") and len(result) == 50 * 1000 + 3


def test_huge_input_without_closing_tag() -> None:
    text = "lead " + "<private>" + "z" * 5_000_000
    assert strip_private(text) == "lead"


def test_deep_strip_covers_keys_values_and_lists() -> None:
    value = {"command": "echo <private>pw</private>ok", "<private>k</private>key": [1, "<private>x</private>y", None]}
    assert strip_private_deep(value) == {"command": "echo ok", "key": [1, "y", None]}
