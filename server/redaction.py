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

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
from detect_secrets.plugins.basic_auth import BasicAuthDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
from detect_secrets.plugins.keyword import DENYLIST as SECRET_KEYWORDS
from detect_secrets.plugins.mailchimp import MailchimpDetector
from detect_secrets.plugins.npm import NpmDetector
from detect_secrets.plugins.openai import OpenAIDetector
from detect_secrets.plugins.pypi_token import PypiTokenDetector
from detect_secrets.plugins.sendgrid import SendGridDetector
from detect_secrets.plugins.slack import SlackDetector
from detect_secrets.plugins.square_oauth import SquareOAuthDetector
from detect_secrets.plugins.stripe import StripeDetector

MARK = "[REDACTED:{kind}]"


@dataclass(frozen=True)
class Detector:
    """One kind of secret: literal triggers (lower case), and the patterns that find it.

    Each pattern comes with the group that is the secret (0: the whole match).
    """

    kind: str
    triggers: tuple[str, ...]
    patterns: tuple[tuple[re.Pattern[str], int], ...]


def _detect_secrets(kind: str, plugin: Any, triggers: Iterable[str], groups: dict[int, int] | None = None) -> Detector:
    """A detect-secrets plugin's patterns; ``groups`` says which group is the secret, by pattern index."""
    return Detector(kind, tuple(triggers),
                    tuple((pattern, (groups or {}).get(n, 0)) for n, pattern in enumerate(plugin().denylist)))


_KEYWORDS = "|".join(SECRET_KEYWORDS)
# Assignments to a name from detect-secrets' keyword list (with affixes, as its plugin
# allows): optional closing quotes, '=' or ':' (or ':=', '=>'), then the value, quoted
# (up to its quote) or bare (up to a space or punctuation, and not a call or subscript
# such as ``os.environ[...]``). Tried only where a keyword occurs (:func:`_keyword_values`).
_KEYWORD_AT = re.compile(
    r"(?i)\w{0,64}?(?:" + _KEYWORDS + r")\w*['\"\]]{0,2}[ \t]*(?::=|=>|[:=])[ \t]*"
    r"(?:\"([^\"\n]{1,256})\"|'([^'\n]{1,256})'|((?![\[{(<])[^\s'\",;(){}\[\]]{4,256}+)(?![(\[]))"
)
# The same names as command-line flags: ``--password hunter2``, ``-p`` is too vague to tell.
_KEYWORD_FLAG = re.compile(r"(?i)--(?:" + _KEYWORDS + r"|token)(?:=|[ \t]+)(?![-'\"])(\S{2,256})")
# A key of a JSON object that names a secret (``password``, ``DB_PASSWORD``, ``api_key``,
# ``access_token``): its string value is redacted whole.
_SECRET_NAME = re.compile(r"(?i)(?:" + _KEYWORDS + r")\w*$|token$")
# A value that is plainly not a secret: a placeholder, a variable, a redaction already.
_NOT_A_SECRET = re.compile(r"(?i)^(?:\[REDACTED|none|null|true|false|undefined|\$\{?\w+\}?|<[^>]*>|\*+|x+|)$")

DETECTORS: tuple[Detector, ...] = (
    Detector("private-key", ("private key", "putty-user-key"), (
        (re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----.*?"
                    r"(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\Z)", re.S), 0),
        (re.compile(r"PuTTY-User-Key-File-\d.*?(?:Private-MAC: \S+|\Z)", re.S), 0),
    )),
    Detector("anthropic-key", ("sk-ant-",), ((re.compile(r"sk-ant-[A-Za-z0-9_\-]{16,}"), 0),)),
    Detector("api-key", ("sk-",), ((re.compile(r"(?<![A-Za-z0-9])sk-(?:proj-|svcacct-)?[A-Za-z0-9_\-]{20,}"), 0),)),
    Detector("bearer-token", ("bearer",), ((re.compile(r"(?i)\bbearer\s+([A-Za-z0-9._~+/\-]{12,}=*)"), 1),)),
    _detect_secrets("aws-access-key", AWSKeyDetector, ("akia", "asia", "abia", "acca", "a3t", "aws"), {1: 1}),
    _detect_secrets("azure-storage-key", AzureStorageKeyDetector, ("accountkey=",)),
    _detect_secrets("url-password", BasicAuthDetector, ("://",), {0: 1}),
    _detect_secrets("github-token", GitHubTokenDetector, ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")),
    _detect_secrets("gitlab-token", GitLabTokenDetector, ("glpat-", "gldt-", "glft-", "glsoat-", "glrt-", "gr1348941",
                                                          "glcbt-", "glimt-", "glptt-", "glagent-", "gloas-")),
    # detect-secrets' JWT pattern ends lazily (it validates matches afterwards): it would leave the signature.
    Detector("jwt", ("eyj",), ((re.compile(r"eyJ[A-Za-z0-9_=\-]+\.[A-Za-z0-9_=\-]+(?:\.[A-Za-z0-9_.+/=\-]*)?"), 0),)),
    _detect_secrets("mailchimp-key", MailchimpDetector, ("-us",)),
    _detect_secrets("npm-token", NpmDetector, ("_authtoken",), {0: 1}),
    _detect_secrets("openai-key", OpenAIDetector, ("t3blbkfj",)),
    _detect_secrets("pypi-token", PypiTokenDetector, ("pypi-",)),
    _detect_secrets("sendgrid-key", SendGridDetector, ("sg.",)),
    _detect_secrets("slack-token", SlackDetector, ("xox", "hooks.slack.com")),
    _detect_secrets("square-secret", SquareOAuthDetector, ("sq0csp-",)),
    _detect_secrets("stripe-key", StripeDetector, ("k_live_",)),
)
KEYWORD_TRIGGERS = ("pass", "pwd", "secret", "key", "contras")  # every keyword holds one of these
_ALL_TRIGGERS = tuple(sorted({t for d in DETECTORS for t in d.triggers} | set(KEYWORD_TRIGGERS) | {"token"}))
_ALL_TRIGGERS_BYTES = tuple(t.encode() for t in _ALL_TRIGGERS)


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


def _keyword_values(text: str, lowered: str) -> str:
    """``text`` with the values assigned to secret names redacted (``lowered`` is ``text.lower()``)."""
    mark = MARK.format(kind="secret")
    if len(lowered) != len(text):  # lower() changed some length (rare scripts): positions differ
        candidates = range(len(text)) if any(t in lowered for t in KEYWORD_TRIGGERS) else range(0)
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
        match = _KEYWORD_AT.match(text, start)
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

    def text(self, text: str) -> str:
        """``text`` with every secret found replaced by its mark."""
        if not self.enabled or not text:
            return text
        lowered = text.lower()
        result = text
        for detector in DETECTORS:
            if any(trigger in lowered for trigger in detector.triggers):
                for pattern, group in detector.patterns:
                    result = _replace(pattern, group, detector.kind, result)
        if any(trigger in lowered for trigger in KEYWORD_TRIGGERS):
            result = _keyword_values(result, result.lower() if result is not text else lowered)
            if "--" in result:
                result = _replace(_KEYWORD_FLAG, 1, "secret", result)
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
        if not self._custom:
            lowered = encoded.lower()
            if not any(trigger in lowered for trigger in _ALL_TRIGGERS_BYTES):
                return value
        return self._walk(value)

    def _walk(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            out = {}
            for key, item in value.items():
                name = self.text(str(key))
                if isinstance(item, str) and _SECRET_NAME.search(name) and not _NOT_A_SECRET.match(item):
                    self.redactions += 1
                    out[name] = MARK.format(kind="secret")
                else:
                    out[name] = self._walk(item)
            return out
        if isinstance(value, list):
            return [self._walk(item) for item in value]
        return value
