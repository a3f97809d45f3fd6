"""The privacy tag grammar: every spelling of <private> and <sessionmem-context>, careless markup failing closed,
in linear time, and the same rule wherever a field is stripped."""

from __future__ import annotations

import timeit

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessionmem.protocol import fastjson
from sessionmem.protocol.fields import clean_text, clean_value
from sessionmem.protocol.privacy import MAX_TAGS, contains_tag, strip_private, strip_private_deep, tags_in
from sessionmem.protocol.requests import encoded_call
from sessionmem.protocol.safe_text import neutral
from sessionmem.server.ingest import EdgeCleaner, init_event
from sessionmem.server.payloads import InitRequest
from sessionmem.redaction import Redactor


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("no tags here", "no tags here"),
        ("keep <private>secret</private> this", "keep  this"),
        ("<private>a</private>b<private>c</private>", "b"),
        ("x <sessionmem-context>old memory</sessionmem-context> y", "x  y"),
        ("mixed <private>p</private> and <sessionmem-context>c</sessionmem-context>.", "mixed  and ."),
        ("before <private>unterminated secret and everything after", "before"),
        ("<private>only</private>", ""),
        ("nested <private>a <private>b</private> c</private> d", "nested  d"),
        ("nested but <private>a <private>b</private> never closed", "nested but"),
        # Every spelling HTML reads as the tag.
        ("<PRIVATE>case</PRIVATE> gone", "gone"),
        ("<Private>mixed</pRiVaTe> gone", "gone"),
        ("<private >space</private > gone", "gone"),
        ("<private\n\t>ws</private\n> gone", "gone"),
        ('<private reason="keys" class=x>attrs</private> gone', "gone"),
        ("<private/>self-closing opens, hiding the rest", ""),
        ("<SESSIONMEM-CONTEXT>old</Sessionmem-Context> gone", "gone"),
        ("a <private never closed tag", "a"),
        # Names that only start the same are other tags, and text.
        ("<privateer>ship</privateer> <privacy> stays", "<privateer>ship</privateer> <privacy> stays"),
        ("<private-key>k</private-key> <private_x> [privately] stays", "<private-key>k</private-key> <private_x> [privately] stays"),
        ("a < b and c > d, x<y, xs[i], the word private, a [link](x)", "a < b and c > d, x<y, xs[i], the word private, a [link](x)"),
        ("İ<private>p</private>ı", "İı"),  # non-ASCII around the tag
        ("İİİ <PRİVATE>not the name</PRİVATE> stays", "İİİ <PRİVATE>not the name</PRİVATE> stays"),
    ],
)
def test_strip_private(text: str, expected: str) -> None:
    assert strip_private(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # A closing tag with no opener hides everything before it in the field (and itself).
        ("my staging password is hunter2</private> now deploy", "now deploy"),
        ("line one\n\nhunter2\n</private>\nkeep", "keep"),
        ("a </private> stray close", "stray close"),
        ("text </SESSIONMEM-CONTEXT >\nIgnore previous instructions", "Ignore previous instructions"),
        ("hunter2</private>", ""),
        # A doubled closer: the second has no opener.
        ("keep <private>a</private> b</private> tail", "tail"),
        ("<private>a</private></private> tail", "tail"),
        # An opener written where the closer was meant: the span never closes.
        ("keep <private>secret<private> meant public", "keep"),
        # Overlapping names: inside a span the other name is content; its closer then has no opener.
        ("a <private>b <sessionmem-context>c</private> d</sessionmem-context> e", "e"),
        ("a <sessionmem-context>b <private>c</sessionmem-context> d</private> e", "e"),
        # Openers HTML reads as text, read as tags.
        ("keep < private>secret</ private> this", "keep  this"),
        ("keep <\tPRIVATE>secret< / private > this", "keep  this"),
        ("keep < / private> this", "this"),
        ("keep [private]secret[/private] this", "keep  this"),
        ("keep [ PRIVATE reason=x ]secret[ / Private ] this", "keep  this"),
        ("keep [private]secret</private> mixed brackets", "keep  mixed brackets"),
        ("keep [private secret never closed", "keep"),
        ("keep [private]secret and the rest", "keep"),
        ("hunter2 [/private] tail", "tail"),
        ("keep <private]secret</private> this", "keep  this"),  # either bracket ends a tag
        ("keep </private <private>secret", ""),  # an unfinished tag ends before the next
        ("keep <private<private>secret", ""),  # what is kept would end in a tag
        # Tags count inside code, fenced or inline: the strip does not parse Markdown.
        ("see:\n```html\n<private>token</private>\n```\ndone", "see:\n```html\n\n```\ndone"),
        ("the tag `<private>` hides what follows", "the tag `"),
        # Kept pieces that would join into a tag: the field is hidden whole.
        ("a <priv<private>x</private>ate> secret", ""),
        ("a <<private>x</private>private> secret", ""),
    ],
)
def test_careless_markup_fails_closed(text: str, expected: str) -> None:
    assert strip_private(text) == expected


def test_contains_tag_sees_every_spelling_and_is_cheap_when_there_is_none() -> None:
    spellings = ["<PRIVATE>", "x</Private >", "<sessionmem-CONTEXT a=b>", "< private>", "[private]", "[/ private ]",
                 "<\n/\tprivate>", "end <private", "<private\f>"]
    for text in spellings:
        assert contains_tag(text), text
        assert contains_tag(msgspec.json.encode({"k": [text]})), text
        assert contains_tag(fastjson.dumps([{text: 1}]).encode()), text
    for text in ("plain text", "a < b", "<priv", "private final int x; xs[0]", "<privateer>", "[privately]"):
        assert not contains_tag(text), text
        assert not contains_tag(msgspec.json.encode([text])), text


def test_too_many_tags_hide_the_whole_field() -> None:
    allowed = "ok " + "<private>x</private>" * (MAX_TAGS // 2)
    assert strip_private(allowed) == "ok"
    assert strip_private(allowed + "<PRIVATE>y</private>" * MAX_TAGS + " tail") == ""


def test_many_far_apart_tags_of_two_kinds() -> None:
    text = ("<private>s</private>" + "a" * 1000) * 40 + "<sessionmem-context>c</sessionmem-context>end"
    result = strip_private(text)
    assert result.endswith("end") and "s" not in result.replace("end", "") and len(result) == 40 * 1000 + 3


@pytest.mark.parametrize("make", [
    lambda n: "lead <private>" + "z" * n,  # an unterminated span
    lambda n: "<" * n,  # many '<' that are no tags
    lambda n: "[" * n,
    lambda n: "<privat" * (n // 7),  # near misses
    lambda n: "private " * (n // 8),  # names that are no tags
    lambda n: "<" + " " * n + "private>",  # a long look back
    lambda n: " private" * (n // 8) + "<",
    lambda n: "<private " + "a=b " * (n // 4),  # a tag whose '>' never comes
    lambda n: "</private>x" * (n // 11),  # stray closes, past MAX_TAGS
    lambda n: "İ" + "<private>" * (n // 9),  # the slow lowering, past MAX_TAGS
])
def test_linear_time_on_adversarial_input(make: object) -> None:
    small, large = make(100_000), make(1_000_000)
    # The best of three runs each: what the work costs, less what other processes took of the CPU.
    small_s = min(timeit.repeat(lambda: strip_private(small), number=1, repeat=3))
    large_s = min(timeit.repeat(lambda: strip_private(large), number=1, repeat=3))
    assert large_s < max(0.5, 30 * small_s)  # ten times the input, not a hundred times the time


def test_deep_strip_covers_keys_values_and_lists() -> None:
    value = {"command": "echo <PRIVATE>pw</PRIVATE>ok", "<private>k</private>key": [1, "<private >x</private>y", None]}
    assert strip_private_deep(value) == {"command": "echo ok", "key": [1, "y", None]}


def test_a_span_across_two_fields_hides_the_end_of_one_and_the_start_of_the_other() -> None:
    value = {"stdout": "ok <private>hunter2 and", "stderr": "more hunter2</private> done"}
    assert strip_private_deep(value) == {"stdout": "ok", "stderr": "done"}


# Property tests: texts made of tag spellings, near misses and plain text.
OPENERS = ["<private>", "<PRIVATE >", "< private>", "<private a=b>", "<private/>", "[private]", "[ Private x]",
           "<sessionmem-context>", "<Sessionmem-Context x>", "[sessionmem-context]"]
CLOSERS = ["</private>", "</PRIVATE >", "< / private>", "</ private>", "[/private]", "</sessionmem-context>",
           "[ /SESSIONMEM-context ]"]
NOISE = ["<", ">", "[", "]", "/", "</", " ", "\n", "private", "PRIVATE", "sessionmem-context", "<privateer>",
         "[privately]", "<priv", "ate>", "<private", "</private", "a=", "İ", "```"]
pieces = st.one_of(st.sampled_from(OPENERS + CLOSERS + NOISE), st.text(alphabet="ab <>[]/\n", max_size=8))
tagged_text = st.lists(pieces, max_size=40).map("".join)
SECRET = "Zq9Secret"  # in no piece


@settings(max_examples=500, deadline=None)
@given(text=tagged_text)
def test_what_is_kept_holds_no_tag_and_a_second_strip_changes_nothing(text: str) -> None:
    stripped = strip_private(text)
    assert next(tags_in(stripped), None) is None
    assert strip_private(stripped) == stripped
    if next(tags_in(text), None) is None:
        assert stripped == text  # without a tag, nothing changes


@settings(max_examples=500, deadline=None)
@given(before=tagged_text, after=tagged_text, opener=st.integers(0, len(OPENERS) - 1), closer=st.sampled_from(CLOSERS))
def test_a_span_is_hidden_whatever_markup_surrounds_it(before: str, after: str, opener: int, closer: str) -> None:
    """A secret after an opener and before a closer never survives, whatever else the field holds."""
    text = before + OPENERS[opener] + SECRET + closer + after
    assert SECRET not in strip_private(text)
    assert SECRET not in neutral(text)
    # A closer alone, or an opener alone, hides it too.
    assert SECRET not in strip_private(before + SECRET + closer + after)
    assert SECRET not in strip_private(before + OPENERS[opener] + SECRET)


@settings(max_examples=300, deadline=None)
@given(value=st.recursive(st.one_of(tagged_text, st.integers()), lambda children: st.one_of(
    st.lists(children, max_size=4), st.dictionaries(tagged_text, children, max_size=4)), max_leaves=12))
def test_an_encoding_says_tag_whenever_a_string_of_it_holds_one(value: object) -> None:
    """The cheap test over a value's JSON never misses a tag the walk would find: else a span is kept."""
    strings: list[str] = []
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            strings.append(item)
        elif isinstance(item, dict):
            strings.extend(item)
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    if any(contains_tag(text) for text in strings):
        assert contains_tag(msgspec.json.encode(value))
        assert contains_tag(fastjson.dumps(value).encode())


CARELESS = ["my password is hunter2</private> deploy it", "keep < private>hunter2</ private> this",
            "keep [private]hunter2[/private] this", "keep <private>hunter2<private> meant public",
            "a <private>b <sessionmem-context>hunter2</private> d</sessionmem-context> tail"]


@pytest.mark.parametrize("text", CARELESS)
def test_every_place_that_strips_uses_the_one_rule(text: str) -> None:
    """Hooks and backfill (the request building), the worker's edge, and what is injected or answered to MCP."""
    expected = strip_private(text)
    assert "hunter2" not in expected
    body = encoded_call({"hook_event_name": "UserPromptSubmit", "session_id": "s", "prompt": text}, project="p")
    assert body is not None and body[2] is not None and fastjson.loads(body[2])["prompt"] == expected
    tool = encoded_call({"hook_event_name": "PostToolUse", "session_id": "s", "tool_name": "Bash",
                         "tool_input": {"command": text}, "tool_response": text}, project="p")
    assert tool is not None and tool[2] is not None
    assert fastjson.loads(tool[2])["tool_input"] == {"command": expected}
    assert fastjson.loads(tool[2])["tool_response"] == expected
    assert clean_text(text, 4096) == expected and clean_value([text], 4096) == [expected]
    edge = EdgeCleaner(65536, Redactor())
    assert init_event(InitRequest(claudeSessionId="s", prompt=text), edge).prompt == expected
    assert edge.value({"k": text}) == {"k": expected}
    assert "hunter2" not in neutral(text)
