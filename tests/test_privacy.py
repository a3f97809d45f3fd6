"""The privacy tag grammar: every spelling of <private> and <sessionmem-context>, careless markup failing closed,
in linear time, and the same rule wherever a field is stripped."""

from __future__ import annotations

import time
import timeit
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessionmem.protocol import fastjson
from sessionmem.protocol.fields import clean_text, clean_value
from sessionmem.protocol.privacy import MAX_TAGS, contains_tag, strip_private, strip_private_deep, tags_in
from sessionmem.protocol.requests import encoded_call
from sessionmem.protocol.safe_text import neutral
from sessionmem.redaction import Redactor
from sessionmem.server.ingest import EdgeCleaner, init_event
from sessionmem.server.payloads import InitRequest


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


# -- encodings: tags as tools print them -----------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("keep &lt;private&gt;secret&lt;/private&gt; this", "keep  this"),  # a web page
    ("keep &LT;PRIVATE&GT;secret&LT;/PRIVATE&GT; this", "keep  this"),
    ("keep &lt private &gt secret &lt/private&gt this", "keep  this"),  # HTML reads &lt without its ';'
    ("keep &#60;private&#62;secret&#x3C;/private&#x3e; this", "keep  this"),
    ("keep &#0060;private&#x0003E;secret&#60;&sol;private&#62; this", "keep  this"),
    ("keep &lsqb;private&rsqb;secret&lbrack;/private&rbrack; this", "keep  this"),
    ("keep &#112;&#114;ivate is no tag: <&#112;rivate>secret</private> this", "keep &#112;&#114;ivate is no tag: "
     " this"),
    ('keep \\u003cprivate\\u003esecret\\u003c/private\\u003e this', "keep  this"),  # gh --json
    ('keep \\u003Cprivate\\u003Esecret\\u003C\\/private\\u003E this', "keep  this"),
    ("keep <private>secret<\\/private> this", "keep  this"),  # a JSON writer that escapes '/'
    ("keep \\x3cprivate\\x3esecret\\x3c/private\\x3e this", "keep  this"),  # JavaScript
    ("keep %3Cprivate%3Esecret%3C%2Fprivate%3E this", "keep  this"),  # a URL
    ("keep %3cprivate%3esecret%3c/private%3e this", "keep  this"),
    ("keep %EF%BC%9Cprivate%EF%BC%9Esecret%EF%BC%9C/private%EF%BC%9E this", "keep  this"),  # full-width, in UTF-8
    ("keep ＜private＞secret＜/private＞ this", "keep  this"),  # an input method
    ("keep ＜ｐｒｉｖａｔｅ＞secret＜／ＰＲＩＶＡＴＥ＞ this", "keep  this"),
    ("keep ﹤private﹥secret﹤/private﹥ this", "keep  this"),  # small forms
    ("keep ［private］secret［/private］ this", "keep  this"),
    ("keep &#xFF1C;private&#xFF1E;secret&#xFF1C;/private&#xFF1E; this", "keep  this"),  # an entity of a fold
    ("keep &amp;lt;private&amp;gt;secret&amp;lt;/private&amp;gt; this", "keep  this"),  # twice encoded
    ("keep %253Cprivate%253Esecret%253C%252Fprivate%253E this", "keep  this"),
    ("keep \\\\u003cprivate\\\\u003esecret\\\\u003c/private\\\\u003e this", "keep  this"),  # JSON inside JSON
    ("keep &lt;private&gt;secret</private> this", "keep  this"),  # encodings mixed
    ("keep <sessionmem-context>old</sessionmem-context> \\u003csessionmem-context\\u003eold\\u003c/sessionmem-"
     "context\\u003e this", "keep   this"),
    # Failing closed: an encoded opener without its closer, or whose closer does not decode.
    ("keep this &lt;private&gt;secret and the rest", "keep this"),
    ("keep this %3Cprivate%3Esecret%3C/private%3 and the rest", "keep this"),
    ("keep this \\u003cprivate\\u003esecret \\u003c/private\\u00 and the rest", "keep this"),
    ("keep this ＜private＞secret%C0%BC/private> the rest", "keep this"),  # an overlong UTF-8 '<' is none
    ("my password is hunter2&lt;/private&gt; deploy it", "deploy it"),  # a closer alone hides what precedes it
    # Kept pieces that decode into a tag: the field is hidden whole.
    ("a &lt;priv<private>x</private>ate&gt; secret", ""),
    # Encoded deeper than anyone writes (five times): hidden whole, as past MAX_TAGS.
    ("a &amp;amp;amp;amp;amp;lt;private&gt;x", ""),
    # Encodings of nothing of a tag are kept as they are; a run of backslashes escaping nothing is text.
    ("C:" + "\\" * 40 + " kept as text", "C:" + "\\" * 40 + " kept as text"),
    ("AT&T &amp; 100% of C:\\\\dir\\\\file, \\u00e9t\\u00e9 %20 &#233; ﬁne ＡＢＣ", "AT&T &amp; 100% of "
     "C:\\\\dir\\\\file, \\u00e9t\\u00e9 %20 &#233; ﬁne ＡＢＣ"),
    ("&lt;privateer&gt; %3Cprivacy%3E \\u003cprivate-key\\u003e ＜ｐｒｉｖａｔｅｅｒ＞", "&lt;privateer&gt; %3Cprivacy%3E "
     "\\u003cprivate-key\\u003e ＜ｐｒｉｖａｔｅｅｒ＞"),
])
def test_tags_are_read_through_encodings(text: str, expected: str) -> None:
    assert strip_private(text) == expected
    if expected != text:
        assert contains_tag(text)
        assert contains_tag(msgspec.json.encode({"k": [text]})) and contains_tag(fastjson.dumps([text]).encode())


def _fullwidth(character: str) -> str:
    return chr(ord(character) + 0xFEE0) if "!" <= character <= "~" else character


ENCODINGS = {
    "plain": lambda c: c,
    "decimal reference": lambda c: f"&#{ord(c)};",
    "hexadecimal reference": lambda c: f"&#x{ord(c):X};",
    "named reference": lambda c: {"<": "&lt;", ">": "&gt;", "/": "&sol;", "[": "&lsqb;", "]": "&rsqb;"}.get(c, c),
    "json escape": lambda c: f"\\u{ord(c):04x}",
    "javascript escape": lambda c: f"\\x{ord(c):02x}",
    "percent": lambda c: f"%{ord(c):02X}",
    "full-width": _fullwidth,
    "full-width, percent": lambda c: "".join(f"%{byte:02x}" for byte in _fullwidth(c).encode()),
}
AGAIN = {"none": lambda text: text, "entities": lambda text: text.replace("&", "&amp;"),
         "percent": lambda text: text.replace("%", "%25"), "json": lambda text: text.replace("\\", "\\\\")}


@st.composite
def encoded(draw: st.DrawFn, tag: str) -> str:
    """``tag`` with each character in an encoding of its own, and maybe all of it encoded again."""
    names = sorted(ENCODINGS)
    text = "".join(ENCODINGS[draw(st.sampled_from(names))](character) for character in tag)
    return AGAIN[draw(st.sampled_from(sorted(AGAIN)))](text)


ENCODED_NOISE = ["&", "&amp;", "&#", "&#x", "&lt", "%", "%3", "%E0%A0", "\\", "\\u", "\\u00", "\\uD800", "\\\\",
                 "＜", "ｐ", "ﬁ", "é", "İ", ";", "x"]
noisy_text = st.lists(st.one_of(pieces, st.sampled_from(ENCODED_NOISE)), max_size=30).map("".join)


@settings(max_examples=500, deadline=None)
@given(before=noisy_text, after=noisy_text, opener=st.sampled_from(OPENERS), closer=st.sampled_from(CLOSERS),
       data=st.data())
def test_an_encoded_span_is_hidden_whatever_surrounds_it(before: str, after: str, opener: str, closer: str,
                                                         data: st.DataObject) -> None:
    """A secret between an opener and a closer, each in any mix of encodings, never survives; nor after an
    encoded opener alone, nor before an encoded closer alone; and what is kept holds no tag, as written or
    decoded, so a second strip changes nothing."""
    encoded_opener, encoded_closer = data.draw(encoded(opener)), data.draw(encoded(closer))
    for text in (before + encoded_opener + SECRET + encoded_closer + after, before + encoded_opener + SECRET,
                 before + SECRET + encoded_closer + after):
        stripped = strip_private(text)
        assert SECRET not in stripped, text
        assert not contains_tag(stripped) and strip_private(stripped) == stripped
        assert SECRET not in neutral(text)
        assert contains_tag(text) and contains_tag(msgspec.json.encode([text]))


@settings(max_examples=300, deadline=None)
@given(text=noisy_text)
def test_what_is_kept_holds_no_tag_through_any_encoding(text: str) -> None:
    stripped = strip_private(text)
    assert not contains_tag(stripped) and strip_private(stripped) == stripped
    if not contains_tag(text):
        assert stripped == text


@pytest.mark.parametrize("make", [
    lambda n: "&" * n,
    lambda n: "&#" * (n // 2),
    lambda n: "&#x3c" * (n // 5),  # '<' without a name
    lambda n: "&amp;" * (n // 5),  # three rounds of decoding
    lambda n: "%3C" * (n // 3),
    lambda n: "%E0%A0" * (n // 6),  # UTF-8 never finished
    lambda n: "\\u003c" * (n // 6),
    lambda n: "\\uD800" * (n // 6),  # lone surrogates
    lambda n: "\\" * n,
    lambda n: "＜" * n,
    lambda n: "＜ｐｒｉｖａｔｅ＞" * (n // 9),  # past MAX_TAGS, folded
    lambda n: "&lt;private&gt;" * (n // 15),  # past MAX_TAGS, decoded
    lambda n: "lead &lt;private&gt;" + "z&" * (n // 2),  # an unterminated encoded span
    lambda n: "é" + "<" * n,  # beyond ASCII, in NFKC: nothing to fold
])
def test_linear_time_on_adversarial_encodings(make: object) -> None:
    small, large = make(30_000), make(300_000)
    small_s, large_s = fastest_side_by_side(strip_private, small, large)
    assert large_s < max(0.5, 30 * small_s)  # ten times the input, not a hundred times the time
    small_s, large_s = fastest_side_by_side(contains_tag, msgspec.json.encode([small]), msgspec.json.encode([large]))
    assert large_s < max(0.5, 30 * small_s)


def fastest_side_by_side(function: Callable[[Any], object], small: Any, large: Any, runs: int = 3
                         ) -> tuple[float, float]:
    """The fastest of ``runs`` calls on each input, the two taking turns, in this thread's CPU time: on a busy
    machine a long call is preempted more often than a short one, which wall-clock time would count."""
    small_s, large_s = [], []
    for _ in range(runs):
        small_s.append(timeit.Timer(lambda: function(small), timer=time.thread_time).timeit(number=1))
        large_s.append(timeit.Timer(lambda: function(large), timer=time.thread_time).timeit(number=1))
    return min(small_s), min(large_s)
