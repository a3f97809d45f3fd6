"""Secrets out of everything sessionmem keeps or sends: redaction at every boundary.

Every prompt, tool input and output, error and message passes through
:class:`Redactor` at the ingest edge before it is journaled, so no secret reaches the
database, the full-text and vector indexes, the logs or an LLM. (Hooks cannot do it: a
regular expression engine costs a hook ~9 ms to import. A spooled request waits on disk
in the 0700 data dir, as a 0600 file, until the worker imports, redacts and deletes it.)
The ingest edge follows the ``redact_secrets`` setting; the boundaries between machines
do not: what is pushed to a team database, imported from a file or pulled from a team
database passes through the default rules whatever the setting
(:mod:`sessionmem.storage.boundary`).

What is found, and replaced by ``[REDACTED:<kind>]`` (each token whole, however long:
no pattern stops at a length a longer token of the format exceeds). The patterns follow
detect-secrets' plugins (Yelp, maintained: those that read whole tokens run as they are)
and gitleaks' rules, written anew where they stop at a fixed length (a 99-character
Stripe key kept 75 characters), need a context word, or backtrack:

- cloud keys and tokens: AWS access key ids, secret access keys (assigned, in JSON, or
  as ``aws configure set``'s argument) and session tokens; Google API keys (``AIza``),
  OAuth access and refresh tokens (``ya29.``, ``1//0``) and client secrets
  (``GOCSPX-``); Azure storage account keys; a GCP service account's private key (a PEM
  block); signed URLs' signatures and session tokens (``X-Amz-Signature=``,
  ``X-Amz-Security-Token=``, ``X-Goog-Signature=``, CloudFront's ``Signature=``, an
  Azure SAS's ``sig=``) and the ``Signature=`` of a SigV4 ``Authorization`` header;
- chat tokens: Slack's (bot, user, app-level ``xapp-``, rotating ``xoxe.``) and its
  webhooks, Discord bot tokens (three dotted parts, the first the base64 of the bot's
  numeric id), Telegram bot tokens (``<id>:AA...``);
- payment and webhook secrets: Stripe's secret, restricted and publishable keys
  (``sk_``, ``rk_``, ``pk_``, live or test, of any length), webhook signing secrets
  (``whsec_``), Square's OAuth secrets;
- code hosting and registries: GitHub (``ghp_``, ``gho_``, ``ghu_``, ``ghs_``, ``ghr_``,
  ``github_pat_``), GitLab (``glpat-`` and its other kinds, routable ones included), npm
  (``npm_``, ``_authToken=``), PyPI (``pypi-``), Hugging Face, Vault, DigitalOcean and
  Shopify tokens, SendGrid and Mailchimp keys;
- model APIs: Anthropic (``sk-ant-``) and OpenAI (``sk-proj-``, ``sk-...``) keys (a token
  of their own: an ``sk-`` inside a word or a path, as in the folder Claude Code names
  after a project of a user ``sk``, is none);
- HTTP: the credentials of an ``Authorization`` header of any scheme and ``Bearer``
  tokens, ``X-API-Key`` headers, cookies (a ``Cookie`` or ``Set-Cookie`` header's value,
  ``curl --cookie``), JSON web tokens with their signature, the password of a URL
  (``scheme://user:password@host``, or with no user);
- passwords on a command line (``mysql -p``, ``curl -u``, ``sshpass -p``, ``docker login
  -p``) and in ``.netrc``, Docker's registry logins (``"auth": "..."``), and PEM private
  key blocks: whole (header to footer; without a footer, to the end of the text), or the
  end of one whose start was cut away;
- assignments to a name on detect-secrets' keyword list (``password=...``,
  ``"api_key": "..."``, ``secret: ...``), and to a name ending in ``token`` of a
  token-like value: the value, to its end; in a structured value, a string under a key
  naming a secret (not one naming something about it: ``passwordPolicy``), or a cookie;
- a key with no name beside it: a run of 32 or more base64 characters, of upper and lower
  case and digits, random enough (Shannon entropy per character, as detect-secrets' and
  gitleaks' high-entropy rules), not a path, a hex digest or an identifier;
- where a text was cut to head and tail before the worker saw it, the piece of a word
  at each cut (half a token, which no pattern knows any more);
- the patterns of the ``redact_patterns`` setting (regular expressions; a group, if
  any, is what is redacted).

Cost: each kind has a few literal triggers, all found in one pass over the text by
an Aho-Corasick automaton (``ahocorasick-rs``, the Rust ``aho-corasick`` crate: on the
corpus's 13,268 tool inputs, outputs and messages it found the same triggers as
``pyahocorasick`` at 0.24-0.38 of its time); the regular expressions of a kind run
only on text holding one of its triggers, and the keyword and token rules only at
the start of a word holding a keyword or ``token`` (run over the whole text, the token
rule was 21 % of redaction's time on the corpus). Every pattern is linear in the
text: a trigger word repeated over 64 KiB takes at most ~90 ms (on a loaded 2-core machine). ``bench/edge_cost.py``
measures the usual cost on the corpus, ``bench/redaction_worst.py`` the worst.

Error handling:
    A bad pattern in the settings is refused when the settings are read. Redaction
    never raises on input.
"""

from __future__ import annotations

import importlib
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any

from sessionmem.protocol.limits import ELISION

MARK = "[REDACTED:{kind}]"


@dataclass(frozen=True)
class Detector:
    """One kind of secret: literal triggers, and the patterns that find it.

    The patterns run only on text holding one of the triggers (as written, or in any
    case when ``any_case``). Each pattern comes with the group that is the secret
    (0: the whole match). ``then``, if any, runs after them: what a pattern cannot say.
    """

    kind: str
    triggers: tuple[str, ...]
    patterns: tuple[tuple[re.Pattern[str], int], ...]
    any_case: bool = False
    then: Callable[[str], str] | None = None


@dataclass(frozen=True)
class Triggers:
    """Every trigger word in one automaton; ``what[i]`` is what word ``i`` starts (a detector's index,
    or :data:`KEYWORD`, :data:`FLAG`, :data:`TOKEN`). ``in_utf8`` finds the same words in UTF-8 (a
    value's JSON, which need not be decoded for it: the words are ASCII, and no byte of another
    character is one)."""

    automaton: Any  # ahocorasick_rs.AhoCorasick
    what: tuple[int, ...]
    words: tuple[str, ...]
    in_utf8: Any  # ahocorasick_rs.BytesAhoCorasick


@dataclass(frozen=True)
class Patterns:
    detectors: tuple[Detector, ...]
    keyword_at: re.Pattern[str]  # an assignment to a secret name, tried where a keyword occurs
    keyword_flag: re.Pattern[str]  # the same names as command-line flags
    secret_name: re.Pattern[str]  # a JSON key that names a token
    token_at: re.Pattern[str]  # a name ending in "token" assigned a value
    secret_key: re.Pattern[str]  # a key of a structured value that names a secret (either rule's names)
    triggers: Triggers


# What a trigger word starts besides a detector (whose index is >= 0).
KEYWORD, FLAG, TOKEN = -1, -2, -3
KEYWORD_TRIGGERS = ("pass", "pwd", "secret", "key", "contras")  # every keyword of detect-secrets' list holds one


def _detect_secrets(kind: str, plugin: str, triggers: Iterable[str], groups: dict[int, int] | None = None) -> Detector:
    """A detect-secrets plugin's patterns (``module:Class``); ``groups`` says which group is the secret."""
    module, name = plugin.split(":")
    denylist = getattr(importlib.import_module(f"detect_secrets.plugins.{module}"), name)().denylist
    return Detector(kind, tuple(triggers), tuple((pattern, (groups or {}).get(n, 0)) for n, pattern in enumerate(denylist)))


def _begins_a_token(literal: str) -> str:
    """A look behind ``literal`` (which the pattern begins with): it starts a token, not the middle of a word or
    of a path (after a letter or digit, ``/``, ``\\`` or ``-``); after an escaped line break or tab (``\\n``
    in a JSON text inside the text) it does."""
    return rf"(?:(?<=\\[ntr]{literal})|(?<![A-Za-z0-9/\\\-]{literal}))"


# How the base64 of a decimal number (a Discord bot's id, ASCII digits 0x30-0x39) begins: each byte is
# 0011xxxx, so its first four characters are one of these 1,200 (the triggers of Discord's tokens).
_DISCORD_STARTS = tuple(a + b + c + d for a in "MNO" for b in "DTjz" for c in "AEIMQUYcgk" for d in "wxyz012345")


def _token(literal: str, rest: str) -> str:
    """A token that begins with ``literal`` (a regular expression of fixed width, as written) where a token can
    begin (not inside a run of token characters), then ``rest``. The literal comes first: a pattern that
    begins with a look-behind is tried at every position of the text, one that begins with a literal is
    searched for it."""
    return rf"{literal}(?<![A-Za-z0-9_-]{literal})" + rest


# A value that is plainly not a secret: a placeholder, a variable, a redaction already.
_NOT_A_SECRET = re.compile(r"(?i)^(?:\[REDACTED|none|null|true|false|undefined|\$\{?\w+\}?|<[^>]*>|\*+|x+|"
                           r"~?/[\w.@/-]*|https?://[^\s@]*|)$")  # also: a path, a URL with no user in it
# A key that names something about a secret, not the secret (passwordPolicy, secretName, pwdLastSet).
_ABOUT_A_SECRET = re.compile(r"(?i)(?:policy|name|names|url|uri|length|len|header|file|path|arn|id|hint|less|type|"
                             r"field|prompt|set|count|expiry|expires|expires_at|ttl|rule|rules|reset|required|"
                             r"min|max|version|enabled)$")


@cache
def load_patterns() -> Patterns:
    """Import detect-secrets and compile every pattern (~0.2 s, once: the worker does it off the Trio thread)."""
    from detect_secrets.plugins.keyword import DENYLIST as secret_keywords

    keywords = "|".join(secret_keywords)
    detectors = (*_key_detectors(), *_service_detectors(), *_header_and_command_line_detectors())
    return Patterns(detectors, *_assignment_patterns(keywords), _trigger_automaton(detectors))


def _key_detectors() -> tuple[Detector, ...]:
    """Private keys and the API keys and tokens of a known shape (the order is the detectors' order)."""
    return (
        Detector("private-key", ("PRIVATE KEY", "PuTTY-User-Key"), (
            (re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----.*?"
                        r"(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\Z)", re.S), 0),
            (re.compile(r"PuTTY-User-Key-File-\d.*?(?:Private-MAC: \S+|\Z)", re.S), 0),
        ), then=_headless_key_blocks),
        # Patterns begin with their literal and look behind it for where it may start (see "password").
        # An `sk-` key is a word of its own, never a piece of a path: not after a letter or digit
        # ("task-ant-colony-sim"), a slash, a backslash or a dash (a folder "sk-...", or a user "sk" in
        # Claude Code's folder of a project, "-Users-sk-src-..."), and not followed by a slash (a folder
        # "sk-.../"). A backslash may follow one: the end of a key inside escaped JSON (\"sk-...\").
        Detector("anthropic-key", ("sk-ant-",), (
            (re.compile(r"sk-ant-" + _begins_a_token("sk-ant-") + r"[A-Za-z0-9_\-]{16,}+(?!/)"), 0),)),
        Detector("api-key", ("sk-",), (
            (re.compile(r"sk-" + _begins_a_token("sk-") + r"(?:proj-|svcacct-)?[A-Za-z0-9_\-]{20,}+(?!/)"), 0),)),
        Detector("bearer-token", ("bearer",), ((re.compile(r"(?i)\bbearer\s+([A-Za-z0-9._~+/\-]{12,}=*)"), 1),),
                 any_case=True),
        # detect-secrets' JWT pattern ends lazily (it validates matches afterwards): it would leave the signature.
        # It starts where a token can (not inside a run of token characters: "eyJeyJ..." stays linear).
        Detector("jwt", ("eyJ",), ((re.compile(r"eyJ(?<![A-Za-z0-9_=\-]eyJ)[A-Za-z0-9_=\-]++\.[A-Za-z0-9_=\-]++"
                                               r"(?:\.[A-Za-z0-9_.+/=\-]*+)?"), 0),)),
        # Fine-grained GitHub tokens, and a URL's password with no user name (redis://:pw@host):
        # detect-secrets' GitHub and basic-auth patterns miss both.
        Detector("github-token", ("github_pat_", "ghp_", "gho_", "ghu_", "ghs_", "ghr_"), (
            (re.compile(r"(?:github_pat_[A-Za-z0-9_]{22,}+|gh[pousr]_[A-Za-z0-9_]{36,}+)"), 0),)),
        Detector("url-password", ("://:",), ((re.compile(r"://:([^\s:/?#@]{1,256})@"), 1),)),
        _detect_secrets("aws-access-key", "aws:AWSKeyDetector", ("AKIA", "ASIA", "ABIA", "ACCA", "A3T", "aws"), {1: 1}),
        _detect_secrets("azure-storage-key", "azure_storage_key:AzureStorageKeyDetector", ("AccountKey=",)),
        _detect_secrets("url-password", "basic_auth:BasicAuthDetector", ("://",), {0: 1}),
        # GitLab's token kinds, of any length, with the dotted tail of a routable token (glpat-....01.0abc).
        Detector("gitlab-token", (
            "glpat-", "gldt-", "glft-", "glsoat-", "glrt-", "GR1348941", "glcbt-", "glimt-", "glptt-", "glagent-",
            "gloas-"), (
            (re.compile(r"(?:gl(?:pat|dt|ft|soat|rt|cbt|imt|ptt|agent|oas)-|GR1348941)[A-Za-z0-9_\-]{20,}+"
                        r"(?:\.[A-Za-z0-9_\-]++)*+"), 0),)),
        _detect_secrets("mailchimp-key", "mailchimp:MailchimpDetector", tuple(f"-us{digit}" for digit in range(10))),
        # detect-secrets' npm and OpenAI patterns backtrack over a whole line from every start
        # ("//" x 32,000 + "_authToken" held the worker 14 s): the same, anchored.
        Detector("npm-token", ("_authToken",), (
            (re.compile(r"/:_authToken=[ \t]*(npm_[A-Za-z0-9]{36}|[A-Fa-f0-9-]{36}|[^\s'\"]{8,512})"), 1),)),
        Detector("openai-key", ("T3BlbkFJ",), (
            (re.compile(r"(?<![A-Za-z0-9_-])sk-[A-Za-z0-9_-]*?[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20}"), 0),)),
        # Token formats detect-secrets does not know: Hugging Face, HashiCorp Vault, npm,
        # DigitalOcean, Shopify.
        Detector("api-token", ("hf_", "hvs.", "npm_", "dop_v1_", "shpat_", "shpca_", "shppa_", "shpss_"), (
            (re.compile(r"(?<![A-Za-z0-9_])(?:hf_[A-Za-z0-9]{30,}+|hvs\.[A-Za-z0-9_-]{24,}+|npm_[A-Za-z0-9]{36,}+"
                        r"|dop_v1_[a-f0-9]{64,}+|shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32,}+)"), 0),)),
    )


def _service_detectors() -> tuple[Detector, ...]:
    """Tokens of Google, chat services and payments, AWS secret keys named without '=', signed URLs."""
    return (
        # Google: API keys (AIza...), OAuth access and refresh tokens (ya29...., 1//0...), OAuth client
        # secrets (GOCSPX-...). A service account's private key is a PEM block (above).
        Detector("google-token", ("AIza", "ya29.", "1//0", "GOCSPX-"), (
            (re.compile(_token(r"AIza", r"[A-Za-z0-9_-]{30,}+") + "|" + _token(r"ya29\.", r"[A-Za-z0-9_.-]{20,}+")
                        + "|" + _token(r"1//0", r"[A-Za-z0-9_-]{30,}+") + "|" + _token(r"GOCSPX-", r"[A-Za-z0-9_-]{20,}+")),
             0),)),
        # Chat: Slack's tokens of every kind (bot, user, app-level xapp-, rotating xoxe.), Telegram bot
        # tokens (<bot id>:AA...), Discord bot tokens (three dotted parts, the first the base64 of the
        # bot's numeric id: see _DISCORD_STARTS).
        Detector("slack-token", ("xox", "xapp-"), (
            (re.compile(r"(?:xox[a-z](?<![A-Za-z0-9]xox[a-z])(?:\.xox[a-z])?|xapp(?<![A-Za-z0-9]xapp))-"
                        r"[A-Za-z0-9-]{8,}+"), 0),)),
        Detector("telegram-token", (":A",), (
            (re.compile(r"[0-9](?<![0-9][0-9])[0-9]{4,15}:A[A-Za-z0-9_-]{30,}+"), 0),)),
        Detector("discord-token", _DISCORD_STARTS, (
            (re.compile(r"[MNO](?<![A-Za-z0-9_-][MNO])[DTjz][AEIMQUYcgk][w-z0-5][A-Za-z0-9_-]{19,24}\."
                        r"[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,}+"), 0),)),
        # Payments: Stripe's secret, restricted and publishable keys of any length, and webhook signing
        # secrets (Stripe's and Svix's whsec_...).
        Detector("stripe-key", ("k_live_", "k_test_", "whsec_"), (
            (re.compile(r"[srp]k_(?<![A-Za-z0-9_][srp]k_)(?:live|test)_[A-Za-z0-9]{10,}+|"
                        + _token("whsec_", r"[A-Za-z0-9+/=_-]{20,}+")), 0),)),
        # An AWS secret access key named without "=" or ":" (aws configure set aws_secret_access_key X).
        Detector("aws-secret-key", ("ecret_access_key", "ecretAccessKey"), (
            (re.compile(r"(?i)secret_?access_?key[\"']?[ \t]*(?::=|=>|=|:|[ \t])[ \t]*[\"']?([A-Za-z0-9/+=]{40,}+)"), 1),),
                 any_case=True),
        # A signed URL's signature or session token (S3 and GCS presigned URLs, CloudFront, an Azure SAS),
        # and the Signature= of an AWS SigV4 Authorization header. Each name begins its pattern, the
        # look behind it after (a pattern that begins with a look-behind is tried at every position).
        Detector("url-signature", ("sig=", "ignature=", "ecurity-token=", "ecurity-Token="), (
            (re.compile(r"(?i)(?:x-(?:amz|goog)-(?:signature|security-token)|signature(?<![\w-]signature)"
                        r"|sig(?<![\w-]sig))=([A-Za-z0-9%+/=_.~-]{8,}+)(?![(\[])"), 1),), any_case=True),
    )


def _header_and_command_line_detectors() -> tuple[Detector, ...]:
    """Cookies, Authorization and API key headers, passwords on a command line or in ~/.netrc."""
    return (
        # Cookies: a Cookie or Set-Cookie header's value (name=value...), curl's --cookie.
        Detector("cookie", ("ookie",), (
            (re.compile(r"(?i)(?:set-cookie|cookie(?<![\w-]cookie))[\"']?[ \t]*:[ \t]*[\"']?"
                        r"([^\s=;,\"']{1,256}=[^\r\n\"']*+)"), 1),
            (re.compile(r"(?i)--cookie(?:=|[ \t]+)[\"']?([^\s\"']{3,}+)"), 1),
        ), any_case=True),
        # An Authorization header's credentials, whatever the scheme (Basic, token, Bearer...).
        Detector("authorization", ("uthorization",), (
            (re.compile(r"(?i)authorization[\"']?[ \t]*[:=][ \t]*[\"']?[A-Za-z-]{2,20}[ \t]+([A-Za-z0-9._~+/=-]{8,}+)"),
             1),), any_case=True),
        # A password given on a command line (mysql -pX, curl -u user:X, sshpass -p X, docker login -p X)
        # or in ~/.netrc: a detector a command, each run only where its word is. Each pattern begins
        # with its word and looks behind for the word's start (where \b before it would say the same):
        # a pattern that begins with a literal is searched for it, one that begins with \b is tried at
        # every position, 11-20 times slower on the corpus's texts.
        *(Detector("password", (word,), ((re.compile(word + rf"(?<!\w{word})" + rest), 1),)) for word, rest in (
            ("mysql", r"(?:dump|admin)?\b[^\n]{0,300}?[ \t]-p([^\s-][^\s]{0,255})"),
            ("machine", r"[ \t]+\S+[ \t]+login[ \t]+\S+[ \t]+password[ \t]+(\S{1,256})"),
            ("curl", r"\b[^\n]{0,300}?[ \t](?:-u|--user)(?:[ \t]+|=)?['\"]?[^\s:'\"]{1,128}:([^\s'\"$][^\s'\"]{0,255})"),
            ("sshpass", r"[ \t]+-p[ \t]*['\"]?([^\s'\"$][^\s'\"]{0,255})"),
            ("docker", r"[ \t]+login\b[^\n]{0,300}?[ \t]-p[ \t]*['\"]?([^\s'\"$-][^\s'\"]{0,255})"),
        )),
        # An API key header (X-API-Key: ..., api-key: ...) and a registry login in a Docker config
        # ("auth": "<base64 of user:password>").
        Detector("api-key", ("api-key", "API-Key", "apikey", "\"auth\""), (
            (re.compile(r"(?i)(?<![\w-])(?:x-)?api-?key[\"']?[ \t]*[:=][ \t]*[\"']?([A-Za-z0-9._~+/=-]{8,}+)(?![(\[])"), 1),
            (re.compile(r'"auth"[ \t]*:[ \t]*"([A-Za-z0-9+/=]{8,1024})"'), 1),
        ), any_case=True),
        _detect_secrets("pypi-token", "pypi_token:PypiTokenDetector", ("pypi-Ag",)),
        _detect_secrets("sendgrid-key", "sendgrid:SendGridDetector", ("SG.",)),
        _detect_secrets("slack-token", "slack:SlackDetector", ("hooks.slack.com",)),
        _detect_secrets("square-secret", "square_oauth:SquareOAuthDetector", ("sq0csp-",)),
    )


def _assignment_patterns(keywords: str) -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str], re.Pattern[str],
                                                 re.Pattern[str]]:
    """A secret assigned to a name (``keywords``: detect-secrets' keyword list, as one alternation), passed as
    a ``--flag``, or held by a JSON key naming a token; and the names of keys whose value is a secret."""
    # Assignments to a name from detect-secrets' keyword list (with affixes, as its plugin
    # allows): optional closing quotes, '=' or ':' (or ':=', '=>'; not '::', which names a scope, as in
    # a test's id "tests/test_api.py::TestAPIKey::test_x"), then the value, quoted
    # (up to its quote) or bare (up to a space or punctuation, and not a call or subscript
    # such as ``os.environ[...]``).
    assign = r"(?::=|=>|=|:(?!:))"
    keyword_at = re.compile(
        r"(?i)\w{0,64}?(?:" + keywords + r")\w{0,64}['\"\]]{0,2}[ \t]*" + assign + r"[ \t]*"
        r"(?:\"([^\"\n]{1,4096})\"|'([^'\n]{1,4096})'|((?![\[{(<])[^\s'\",;(){}\[\]]{4,256}+)(?![(\[]))"
    )
    keyword_flag = re.compile(r"(?i)--(?:" + keywords + r"|token)(?:=|[ \t]+)(?![-'\"])(\S{2,256})")
    # A JSON key naming a token (``"access_token": "..."``): its string value. (Other
    # secret names are caught by ``keyword_at``, in JSON as anywhere.)
    secret_name = re.compile(r'(?i)"\w{0,64}token"[ \t]*:[ \t]*"([^"\\\n]{1,4096})"')
    # A name that ends in "token" assigned what looks like one: 16 or more token characters, letters
    # and digits both (GITHUB_TOKEN=..., "token": "..."). Code assigns names ending in token all the
    # time (csrf_token: csrfToken, pad_token = tokenizer.eos_token, "{token}"): those are left.
    token_at = re.compile(
        r"(?i)(?<![\w])\w{0,64}token['\"\]]{0,2}[ \t]*" + assign + r"[ \t]*['\"]?"
        r"(?=[\w./+=-]{0,256}\d)(?=[\w./+=-]{0,256}[A-Za-z])([\w./+=-]{16,256}+)(?![(\[])")
    secret_key = re.compile(r"(?i)\w{0,64}?(?:" + keywords + r")\w{0,64}|\w{0,64}token|(?:set-)?cookie")
    return keyword_at, keyword_flag, secret_name, token_at, secret_key


def _spellings(word: str) -> set[str]:
    """How a case-blind word is written in practice: lower, UPPER, Title (camelCase ends in Title)."""
    return {word, word.lower(), word.upper(), word.title()}


def _trigger_automaton(detectors: tuple[Detector, ...]) -> Triggers:
    import ahocorasick_rs

    starts: dict[str, int] = {}  # a word listed twice starts what it was listed for last
    for index, detector in enumerate(detectors):
        for trigger in detector.triggers:
            for spelling in _spellings(trigger) if detector.any_case else {trigger}:
                starts[spelling] = index
    for listed, what in ((KEYWORD_TRIGGERS, KEYWORD), (("--",), FLAG), (("token",), TOKEN)):
        for word in listed:
            for spelling in _spellings(word):
                starts[spelling] = what
    words = tuple(starts)
    assert all(word.isascii() for word in words)
    # A DFA, asked for: past 100 words the crate picks a contiguous NFA, which took the corpus's fields
    # 130 ms against the DFA's 60-85 (the DFA of these ~1,300 words is ~1 MB).
    dfa = ahocorasick_rs.Implementation.DFA
    return Triggers(ahocorasick_rs.AhoCorasick(words, implementation=dfa), tuple(starts.values()), words,
                    ahocorasick_rs.BytesAhoCorasick([word.encode() for word in words], implementation=dfa))


def _replace(pattern: re.Pattern[str], group: int, kind: str, text: str) -> str:
    """``text`` with ``group`` of each match of ``pattern`` replaced by the mark of ``kind``."""
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


_KEY_FOOTER = re.compile(r"-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")
_KEY_LINE = re.compile(r"[A-Za-z0-9+/=]{4,}")  # a line of base64, or PGP's checksum (=abcd)


def _headless_key_blocks(text: str) -> str:
    """Key blocks whose start was cut away (a hook cuts a long text to head and tail before the
    worker sees it): each footer left, with the lines of key before it. Complete blocks are gone
    already (the private-key detector runs first), so any footer left is one of these."""
    mark = MARK.format(kind="private-key")
    out: list[str] = []
    done = 0
    for footer in _KEY_FOOTER.finditer(text):
        begin = footer.start()
        while begin > done:  # back over whole lines of key material, at most to the last block
            previous = text.rfind("\n", done, begin - 1)
            line = text[previous + 1:begin].strip()
            if not _KEY_LINE.fullmatch(line):
                break
            begin = previous + 1
        out += [text[done:begin], mark]
        done = footer.end()
    if not out:
        return text
    out.append(text[done:])
    return "".join(out)


# The piece of a word next to where a text was cut to head and tail (by a hook, before the worker
# saw it): half a token no pattern can know any more. A piece of an ordinary word goes too: it was
# cut in two anyway.
_MARKER_HEAD, _CUT_MARK = ELISION.split("{n}")  # the marker head_tail puts at a cut, around its count
_CUT_SIGN_UTF8 = _CUT_MARK.strip().encode()  # the same in JSON, where its line breaks are escaped
_CUT_PIECES = re.compile(rf"[A-Za-z0-9_+/=.-]{{8,}}(?={re.escape(_MARKER_HEAD)}\d+{re.escape(_CUT_MARK)})"
                         rf"|(?<={re.escape(_CUT_MARK)})[A-Za-z0-9_+/=.-]{{8,}}")

# A key with no name beside it ("old key: <40 characters>", an AWS secret access key alone on a line,
# the body of a key block cut from its header): a run of base64 characters, long, of upper case, lower
# case and digits, random enough (Shannon entropy per character; detect-secrets' and gitleaks'
# "high entropy" rule, held to runs no pattern above knows). What else such a run is in tool output --
# a public key, a certificate, a signature, a hash in base64 -- has no worth to memory either. A path
# (more than a few slashes), a hex digest (no upper case), an identifier (``_``, ``-``, ``.``) is none.
_RANDOM_RUN = re.compile(r"(?<![A-Za-z0-9+/=_.\-])[A-Za-z0-9+/]{32,}+={0,2}(?![A-Za-z0-9+/=_.\-])")
# Whether a text can hold such a run at all, at C speed: its bytes with each base64 character made "a"
# and every other byte " " hold 32 "a" in a row. (The expression above, tried at every word of the
# corpus's fields, took longer than all the rest of redaction.)
_BASE64_BYTES = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_AS_RUNS = bytes(ord("a") if byte in _BASE64_BYTES else ord(" ") for byte in range(256))
_LONG_RUN = b"a" * 32


def _may_hold_random_run(data: bytes) -> bool:
    return _LONG_RUN in data.translate(_AS_RUNS)


def _may_hold_random_run_text(text: str) -> bool:
    return len(text) >= 32 and _may_hold_random_run(text.encode("utf-8", "surrogatepass"))


_UPPER, _LOWER = re.compile(r"[A-Z]"), re.compile(r"[a-z]")


def random_bits(length: int) -> float:
    """The entropy a run of ``length`` characters must reach: what 99 in 100 random base64 runs of that
    length reach (4.2 bits a character at 32, 4.45 at 40, 4.67 at 48; 4.9 past 55). A long
    identifier of words (``getUserAccountSettingsFromDatabase2024``: 4.17) stays below."""
    return min(4.2 + 0.031 * (length - 32), 4.9)


def _random_enough(run: str) -> bool:
    """Random as a key is: upper and lower case, a digit (a random run of 32 has five, on
    average), few slashes, and :func:`random_bits` of entropy."""
    if run.count("/") > 4 or not any(character.isdigit() for character in run) \
            or not (_UPPER.search(run) and _LOWER.search(run)):
        return False
    body = run.rstrip("=")
    length = len(body)
    bits = -sum(count / length * math.log2(count / length) for count in Counter(body).values())
    return bits >= random_bits(length)


def _random_runs(text: str) -> str:
    """``text`` with each run of :data:`_RANDOM_RUN` random enough to be a key replaced by its mark.

    In ASCII text (nearly all), the expression is tried only where :data:`_AS_RUNS` shows a run of 32
    base64 characters, and only at its start: tried at every position, it cost more than the rest
    of redaction together."""
    mark = MARK.format(kind="high-entropy")
    if not text.isascii():
        return _RANDOM_RUN.sub(lambda match: mark if _random_enough(match.group(0)) else match.group(0), text)
    runs = text.encode("ascii").translate(_AS_RUNS)
    out: list[str] = []
    done = 0
    at = runs.find(_LONG_RUN)
    while at >= 0:
        start = runs.rfind(b" ", 0, at) + 1
        end = runs.find(b" ", at)
        end = len(runs) if end < 0 else end
        match = _RANDOM_RUN.match(text, start)
        if match is not None and _random_enough(match.group(0)):
            out += [text[done:start], mark]
            done = end = match.end()
        at = runs.find(_LONG_RUN, end)
    if not out:
        return text
    out.append(text[done:])
    return "".join(out)


_NON_WORD = re.compile(r"[^\w]")
# How far past a keyword's start a name can end: keyword_at's prefix and suffix (64 word characters each)
# and the longest keyword of detect-secrets' list (12).
NAME_AFTER_KEYWORD = 64 + 16 + 64


# The rest of a value longer than an assignment's pattern reads (256 characters: each try is bounded so
# that tries at many candidates stay linear): redacted with it, so a long token keeps none of its tail.
_REST_OF_VALUE = re.compile(r"[^\s'\",;(){}\[\]]*+")


def _assigned_values(assignment: re.Pattern[str], text: str, candidates: list[int]) -> str:
    """``text`` with the values of ``assignment`` tried where a secret name's word may hold a candidate
    (where a keyword, or ``token``, starts) redacted: the first group that took part in the match, unless
    it is plainly not a secret, and the rest of its run of value characters (:data:`_REST_OF_VALUE`).

    Tried at the start of each candidate's word only, not over the whole text: a pattern
    that begins with a run of word characters (``\\w{0,64}``) tried at every position
    costs 64 steps a character."""
    mark = MARK.format(kind="secret")
    out: list[str] = []
    done = 0  # text before this is settled
    run_end = -1  # where the run of word characters holding the candidate ends
    for candidate in candidates:
        if candidate >= run_end:
            found = _NON_WORD.search(text, candidate)
            run_end = found.start() if found else len(text)
        if run_end - candidate > NAME_AFTER_KEYWORD:
            continue  # too far from any '=' or ':' to be a name (a long run "pwdpwd..." is linear this way)
        # The candidate may carry a prefix ("db_password", "GITHUB_TOKEN"): start at the beginning of its word.
        start = candidate
        while start > done and candidate - start < 64 and (text[start - 1].isalnum() or text[start - 1] == "_"):
            start -= 1
        if start < done:
            continue
        match = assignment.match(text, start)
        if match is None:
            continue
        group = next(n for n in range(1, (assignment.groups or 0) + 1) if match.start(n) >= 0)
        if _NOT_A_SECRET.match(match.group(group)):
            continue
        out.append(text[done:match.start(group)])
        out.append(mark)
        done = _REST_OF_VALUE.match(text, match.end(group)).end()  # type: ignore[union-attr]  # * always matches
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

    def load(self) -> None:
        """Import the detectors now (otherwise the first text redacted waits for them)."""
        if self._patterns is None:
            self._patterns = load_patterns()

    def text(self, text: str) -> str:
        """``text`` with every secret found replaced by its mark."""
        if not self.enabled or not text:
            return text
        self.load()
        patterns = self._patterns
        assert patterns is not None
        kinds, keywords, flags, tokens = self._scan(text)
        result = text
        for index in sorted(kinds):
            detector = patterns.detectors[index]
            for pattern, group in detector.patterns:
                result = _replace(pattern, group, detector.kind, result)
            if detector.then is not None:
                result = detector.then(result)
        scanned = text
        if keywords:
            if result != scanned:  # positions moved: find the words again (rare)
                _, keywords, _, tokens = self._scan(scanned := result)
            result = _assigned_values(patterns.keyword_at, result, keywords)
        if flags and keywords:
            result = _replace(patterns.keyword_flag, 1, "secret", result)
        if tokens:
            result = _replace(patterns.secret_name, 1, "secret", result)
            if result != scanned:
                tokens = self._scan(scanned := result)[3]
            result = _assigned_values(patterns.token_at, result, tokens)
        if _may_hold_random_run_text(result):
            result = _random_runs(result)
        for pattern, group in self._custom:
            result = _replace(pattern, group, "custom", result)
        if _CUT_MARK in result:
            result = _CUT_PIECES.sub(MARK.format(kind="cut"), result)
        if result != text:
            self.redactions += 1
            return result
        return text

    def _scan(self, text: str) -> tuple[set[int], list[int], bool, list[int]]:
        """One pass: the detectors ``text`` may hold, where keywords start, any ``--`` flag, where ``token``
        starts."""
        assert self._patterns is not None
        kinds: set[int] = set()
        keywords: set[int] = set()
        tokens: list[int] = []
        flags = False
        triggers = self._patterns.triggers
        # Overlapping: every occurrence of every word ("PRIVATE KEY" holds the keyword "KEY").
        for word, start, _ in triggers.automaton.find_matches_as_indexes(text, overlapping=True):
            what = triggers.what[word]
            if what >= 0:
                kinds.add(what)
            elif what == KEYWORD:
                keywords.add(start)
            elif what == FLAG:
                flags = True
            else:
                tokens.append(start)
        return kinds, sorted(keywords), flags, sorted(tokens)

    def value(self, value: Any, encoded: bytes) -> Any:
        """A JSON-like value with secrets redacted; ``encoded`` is its JSON. The value itself when
        nothing was found.

        Each string is redacted as the text it is (not the JSON text: there a line starts
        after the two characters ``\\n``, and the quotes of a file's JSON content are
        ``\\"``, which hid keys at the start of a line and ``"api_key": "..."`` inside a
        file), and a string under a key that names a secret is one. The JSON text serves
        one scan first: it holds every trigger word that any string or key holds (no
        trigger holds a character JSON escapes), so a string holding none of the words
        found there, and no cut, is left alone without a scan of its own -- unless
        ``redact_patterns`` are set, which can match anything. (Nor is one holding only
        a ``--`` when no keyword is found: a flag is redacted only after a keyword.)
        """
        if not self.enabled or value is None or isinstance(value, (bool, int, float)):
            return value
        if isinstance(value, str):
            return self.text(value)
        self.load()
        assert self._patterns is not None
        triggers = self._patterns.triggers
        found = {word for word, _, _ in triggers.in_utf8.find_matches_as_indexes(encoded, overlapping=True)}
        if not any(triggers.what[word] == KEYWORD for word in found):
            # A "--" flag names a secret only with a keyword ("--password x"): without any, no
            # string is redacted for its flags (the commonest case: command lines).
            found = {word for word in found if triggers.what[word] != FLAG}
        if not found and not self._custom and _CUT_SIGN_UTF8 not in encoded and not _may_hold_random_run(encoded):
            return value
        return self._walk(value, tuple({triggers.words[word] for word in found}))

    def _text_holding(self, text: str, words: tuple[str, ...]) -> str:
        """:meth:`text`, for a string that needs it: one holding a word of ``words``, or a cut, or any
        string when there are custom patterns."""
        if self._custom or _CUT_MARK in text or any(word in text for word in words):
            return self.text(text)
        if _may_hold_random_run_text(text):  # nothing else to look for in it
            cleaned = _random_runs(text)
            if cleaned is not text:
                self.redactions += 1
            return cleaned
        return text

    def _walk(self, value: Any, words: tuple[str, ...]) -> Any:
        """``value`` with every string redacted (those holding ``words``: see :meth:`_text_holding`); the
        same object when nothing in it changed."""
        if isinstance(value, str):
            return self._text_holding(value, words)
        if isinstance(value, dict):
            assert self._patterns is not None
            secret_key = self._patterns.secret_key
            out, changed = {}, False
            for key, item in value.items():
                name = self._text_holding(key, words) if isinstance(key, str) else key
                if isinstance(item, str) and isinstance(name, str) and secret_key.fullmatch(name) \
                        and not _ABOUT_A_SECRET.search(name) and not _NOT_A_SECRET.match(item):
                    self.redactions += 1
                    cleaned: Any = MARK.format(kind="secret")
                else:
                    cleaned = self._walk(item, words)
                changed = changed or name is not key or cleaned is not item
                out[name] = cleaned
            return out if changed else value
        if isinstance(value, list):
            items = [self._walk(item, words) for item in value]
            return items if any(new is not old for new, old in zip(items, value)) else value
        return value
