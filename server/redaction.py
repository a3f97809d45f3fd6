"""Secrets out of everything the worker keeps: redaction at the ingest edge.

Every prompt, tool input and output, error and message passes through
:class:`Redactor` before it is journaled, so no secret reaches the database, the
full-text and vector indexes, the logs or an LLM. (Hooks cannot do it: a regular
expression engine costs a hook ~9 ms to import. A spooled request waits on disk in
the 0700 data dir, as a 0600 file, until the worker imports, redacts and deletes it.)

What is found, and replaced by ``[REDACTED:<kind>]``:

- the token formats of `detect-secrets` (Yelp, maintained): AWS access keys, GitHub,
  GitLab, Slack, Stripe, SendGrid, PyPI, npm, Square, Azure storage and Mailchimp
  keys, OpenAI's older keys, and the password of a URL
  (``scheme://user:password@host``, connection strings included);
- assignments to a name on detect-secrets' keyword list (``password=...``,
  ``"api_key": "..."``, ``secret: ...``): the value;
- what detect-secrets does not know, or finds only in part: Anthropic and OpenAI
  ``sk-...`` keys, ``Bearer`` tokens, JSON web tokens with their signature, and whole
  PEM private key blocks (header to footer; without a footer, to the end of the text);
- the patterns of the ``redact_patterns`` setting (regular expressions; a group, if
  any, is what is redacted).

Cost: each kind has a few literal triggers; the regular expressions of a kind run
only on text where one of its triggers occurs, so text without anything secret-like
costs a handful of substring searches.

Error handling:
    A bad pattern in the settings is refused when the settings are read. Redaction
    never raises on input.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any

MARK = "[REDACTED:{kind}]"


@dataclass(frozen=True)
class Detector:
    """One kind of secret: literal triggers (lower case), and the patterns that find it.

    Each pattern comes with the group that is the secret (0: the whole match).
    """

    kind: str
    triggers: tuple[str, ...]
    patterns: tuple[tuple[re.Pattern[str], int], ...]


@dataclass(frozen=True)
class Patterns:
    detectors: tuple[Detector, ...]
    keyword_at: re.Pattern[str]  # an assignment to a secret name, tried where a keyword occurs
    keyword_flag: re.Pattern[str]  # the same names as command-line flags
    secret_name: re.Pattern[str]  # a JSON key that names a secret


def _detect_secrets(kind: str, plugin: str, triggers: Iterable[str], groups: dict[int, int] | None = None) -> Detector:
    """A detect-secrets plugin's patterns (``module:Class``); ``groups`` says which group is the secret."""
    module, name = plugin.split(":")
    denylist = getattr(importlib.import_module(f"detect_secrets.plugins.{module}"), name)().denylist
    return Detector(kind, tuple(triggers), tuple((pattern, (groups or {}).get(n, 0)) for n, pattern in enumerate(denylist)))


# A value that is plainly not a secret: a placeholder, a variable, a redaction already.
_NOT_A_SECRET = re.compile(r"(?i)^(?:\[REDACTED|none|null|true|false|undefined|\$\{?\w+\}?|<[^>]*>|\*+|x+|)$")
KEYWORD_TRIGGERS = ("pass", "pwd", "secret", "key", "contras")  # every keyword of detect-secrets' list holds one


@cache
def load_patterns() -> Patterns:
    """Import detect-secrets and compile every pattern (~0.2 s, once: the worker does it off the Trio thread)."""
    from detect_secrets.plugins.keyword import DENYLIST as secret_keywords

    keywords = "|".join(secret_keywords)
    detectors = (
        Detector("private-key", ("private key", "putty-user-key"), (
            (re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----.*?"
                        r"(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\Z)", re.S), 0),
            (re.compile(r"PuTTY-User-Key-File-\d.*?(?:Private-MAC: \S+|\Z)", re.S), 0),
        )),
        Detector("anthropic-key", ("sk-ant-",), ((re.compile(r"sk-ant-[A-Za-z0-9_\-]{16,}"), 0),)),
        Detector("api-key", ("sk-",), ((re.compile(r"(?<![A-Za-z0-9])sk-(?:proj-|svcacct-)?[A-Za-z0-9_\-]{20,}"), 0),)),
        Detector("bearer-token", ("bearer",), ((re.compile(r"(?i)\bbearer\s+([A-Za-z0-9._~+/\-]{12,}=*)"), 1),)),
        # detect-secrets' JWT pattern ends lazily (it validates matches afterwards): it would leave the signature.
        Detector("jwt", ("eyj",), ((re.compile(r"eyJ[A-Za-z0-9_=\-]+\.[A-Za-z0-9_=\-]+(?:\.[A-Za-z0-9_.+/=\-]*)?"), 0),)),
        _detect_secrets("aws-access-key", "aws:AWSKeyDetector", ("akia", "asia", "abia", "acca", "a3t", "aws"), {1: 1}),
        _detect_secrets("azure-storage-key", "azure_storage_key:AzureStorageKeyDetector", ("accountkey=",)),
        _detect_secrets("url-password", "basic_auth:BasicAuthDetector", ("://",), {0: 1}),
        _detect_secrets("github-token", "github_token:GitHubTokenDetector", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")),
        _detect_secrets("gitlab-token", "gitlab_token:GitLabTokenDetector", (
            "glpat-", "gldt-", "glft-", "glsoat-", "glrt-", "gr1348941", "glcbt-", "glimt-", "glptt-", "glagent-",
            "gloas-")),
        _detect_secrets("mailchimp-key", "mailchimp:MailchimpDetector", ("-us",)),
        _detect_secrets("npm-token", "npm:NpmDetector", ("_authtoken",), {0: 1}),
        _detect_secrets("openai-key", "openai:OpenAIDetector", ("t3blbkfj",)),
        _detect_secrets("pypi-token", "pypi_token:PypiTokenDetector", ("pypi-",)),
        _detect_secrets("sendgrid-key", "sendgrid:SendGridDetector", ("sg.",)),
        _detect_secrets("slack-token", "slack:SlackDetector", ("xox", "hooks.slack.com")),
        _detect_secrets("square-secret", "square_oauth:SquareOAuthDetector", ("sq0csp-",)),
        _detect_secrets("stripe-key", "stripe:StripeDetector", ("k_live_",)),
    )
    # Assignments to a name from detect-secrets' keyword list (with affixes, as its plugin
    # allows): optional closing quotes, '=' or ':' (or ':=', '=>'), then the value, quoted
    # (up to its quote) or bare (up to a space or punctuation, and not a call or subscript
    # such as ``os.environ[...]``).
    keyword_at = re.compile(
        r"(?i)\w{0,64}?(?:" + keywords + r")\w*['\"\]]{0,2}[ \t]*(?::=|=>|[:=])[ \t]*"
        r"(?:\"([^\"\n]{1,256})\"|'([^'\n]{1,256})'|((?![\[{(<])[^\s'\",;(){}\[\]]{4,256}+)(?![(\[]))"
    )
    keyword_flag = re.compile(r"(?i)--(?:" + keywords + r"|token)(?:=|[ \t]+)(?![-'\"])(\S{2,256})")
    # ``password``, ``DB_PASSWORD``, ``api_key``, ``access_token``: its string value is redacted whole.
    secret_name = re.compile(r"(?i)(?:" + keywords + r")\w*$|token$")
    return Patterns(detectors, keyword_at, keyword_flag, secret_name)


def _triggers_bytes(patterns: Patterns) -> tuple[bytes, ...]:
    words = {t for d in patterns.detectors for t in d.triggers} | set(KEYWORD_TRIGGERS) | {"token"}
    return tuple(sorted(word.encode() for word in words))


def _replace(pattern: re.Pattern[str], group: int, kind: str, text: str) -> str:
    mark = MARK.format(kind=kind)
    if group == 0:
        return pattern.sub(mark, text)

    def group_only(match: re.Match[str]) -> str:
        start, end = match.span(group)
        if start < 0:
            return match.group(0)
        offset = match.start(0)
        return match.group(0)[: start - offset] + mark + match.group(0)[end - offset:]

    return pattern.sub(group_only, text)


def _keyword_values(keyword_at: re.Pattern[str], text: str, lowered: str) -> str:
    """``text`` with the values assigned to secret names redacted (``lowered`` is ``text.lower()``)."""
    mark = MARK.format(kind="secret")
    if len(lowered) != len(text):  # lower() changed some length (rare scripts): positions differ
        candidates: Iterable[int] = range(len(text)) if any(t in lowered for t in KEYWORD_TRIGGERS) else ()
    else:
        found = set()
        for trigger in KEYWORD_TRIGGERS:
            position = lowered.find(trigger)
            while position >= 0:
                found.add(position)
                position = lowered.find(trigger, position + 1)
        candidates = sorted(found)
    out: list[str] = []
    done = 0  # text before this is settled
    for candidate in candidates:
        # The keyword may carry a prefix ("db_password"): start at the beginning of its word.
        start = candidate
        while start > done and candidate - start < 64 and (text[start - 1].isalnum() or text[start - 1] == "_"):
            start -= 1
        if start < done:
            continue
        match = keyword_at.match(text, start)
        if match is None:
            continue
        group = next(n for n in (1, 2, 3) if match.start(n) >= 0)
        if _NOT_A_SECRET.match(match.group(group)):
            continue
        out.append(text[done:match.start(group)])
        out.append(mark)
        done = match.end(group)
    if not out:
        return text
    out.append(text[done:])
    return "".join(out)


class Redactor:
    """Finds secrets in text and JSON-like values (see the module docstring)."""

    def __init__(self, *, enabled: bool = True, extra_patterns: Iterable[str] = ()) -> None:
        self.enabled = enabled
        self._custom = tuple((compiled, 1 if compiled.groups else 0) for compiled in map(re.compile, extra_patterns))
        self.redactions = 0  # texts changed
        self._patterns: Patterns | None = None
        self._triggers: tuple[bytes, ...] = ()

    def load(self) -> None:
        """Import the detectors now (otherwise the first text redacted waits for them)."""
        if self._patterns is None:
            patterns = load_patterns()
            self._triggers = _triggers_bytes(patterns)
            self._patterns = patterns

    def text(self, text: str) -> str:
        """``text`` with every secret found replaced by its mark."""
        if not self.enabled or not text:
            return text
        self.load()
        patterns = self._patterns
        assert patterns is not None
        lowered = text.lower()
        result = text
        for detector in patterns.detectors:
            if any(trigger in lowered for trigger in detector.triggers):
                for pattern, group in detector.patterns:
                    result = _replace(pattern, group, detector.kind, result)
        if any(trigger in lowered for trigger in KEYWORD_TRIGGERS):
            result = _keyword_values(patterns.keyword_at, result, result.lower() if result is not text else lowered)
            if "--" in result:
                result = _replace(patterns.keyword_flag, 1, "secret", result)
        for pattern, group in self._custom:
            result = _replace(pattern, group, "custom", result)
        if result != text:
            self.redactions += 1
            return result
        return text

    def value(self, value: Any, encoded: bytes) -> Any:
        """A JSON-like value with secrets redacted; ``encoded`` is its JSON (to look for triggers cheaply).

        Strings are redacted like :meth:`text`; the string value of a key that names a
        secret (``{"password": "..."}``, ``"API_KEY"``) is redacted whole.
        """
        if not self.enabled or value is None or isinstance(value, (bool, int, float)):
            return value
        if isinstance(value, str):
            return self.text(value)
        self.load()
        if not self._custom:
            lowered = encoded.lower()
            if not any(trigger in lowered for trigger in self._triggers):
                return value
        return self._walk(value)

    def _walk(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            out = {}
            for key, item in value.items():
                name = self.text(str(key))
                assert self._patterns is not None
                if isinstance(item, str) and self._patterns.secret_name.search(name) and not _NOT_A_SECRET.match(item):
                    self.redactions += 1
                    out[name] = MARK.format(kind="secret")
                else:
                    out[name] = self._walk(item)
            return out
        if isinstance(value, list):
            return [self._walk(item) for item in value]
        return value
