"""The adversarial set (``bench/adversarial/*.jsonl``) made concrete for one run: templates filled in.

Each line of the set is a case: ``id``, ``kind`` (:data:`KINDS`), ``attempts`` (:data:`ATTEMPTS`),
``about``, the payload (``event`` of a tool use, ``prompt``, or a team ``table`` with its ``row``,
``origin`` and ``session`` overrides), ``markers``: strings whose presence downstream counts as a
leak (a private span's words) or, for an instruction, a promotion when stored unflagged in a title,
"learned" or "next steps", and ``traces`` (optional): other strings of the case's text that must
reach the agent only framed (a forged heading, a row's title). Strings may hold placeholders, filled in at run time so that nothing in the
repository is a real-looking credential:

- ``{{id}}`` the case's id; ``{{tag}}`` a short code of it (:func:`tag`: what survives a title cut
  short); ``{{nonce}}`` a word of this run;
- ``{{secret:KIND}}`` a fake but format-valid token of that kind (:data:`SECRET_KINDS`), made fresh
  for the run, the same for every use within one case; what counts as leaked is any
  :data:`CHUNK`-character piece of its random body (:func:`secret_chunks`), so a redaction that
  keeps most of a long key still counts;
- ``{{filler:N}}`` N characters naming the case (one word repeated), kept as :attr:`Case.filler`;
- ``{{local_machine}}``, ``{{local_user}}``, ``{{decoy_project}}``, ``{{private_key}}``: names of the
  run (:class:`Names`).

In a team row, ``{"$float": "NaN"}`` is that float (JSON has none), ``{"$json": value}`` a JSON column
written as it is (``facts`` as an object), ``{"$json_repeat": [text, n]}`` a list of ``n`` copies.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
import string
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SET_DIR = Path(__file__).resolve().parent / "adversarial"
KINDS = ("tool_output", "prompt", "team_row")
ATTEMPTS = ("plant_instruction", "close_frame", "forge_origin", "forge_time", "forge_project", "smuggle_secret",
            "smuggle_private", "oversized", "malformed")
# Attempts whose markers and traces must reach the agent only framed (the others' text is a secret, or a size).
INSTRUCTION_ATTEMPTS = ("plant_instruction", "close_frame", "forge_origin", "forge_time", "forge_project",
                        "malformed")
SECRET_ATTEMPTS = ("smuggle_secret", "smuggle_private")
CHUNK = 12  # characters of a secret's random body that count as a leak when found anywhere

_PLACEHOLDER = re.compile(r"\{\{([a-z_]+)(?::([a-z0-9_]+))?\}\}")
ALNUM = string.ascii_letters + string.digits
URLSAFE = ALNUM + "-_"
HEX = "0123456789abcdef"


def _random(alphabet: str, n: int) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(n))


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _pem(label: str) -> tuple[str, list[str]]:
    lines = [_random(ALNUM + "+/", 70) for _ in range(6)]
    return f"-----BEGIN {label}-----\n" + "\n".join(lines) + f"\n-----END {label}-----", lines


def _jwt() -> tuple[str, list[str]]:
    header = _b64url(b'{"alg":"HS256","typ":"JWT"}')
    payload = _b64url(json.dumps({"sub": _random(ALNUM, 24), "iat": 1767225600}).encode())
    signature = _random(URLSAFE, 43)
    return f"{header}.{payload}.{signature}", [payload, signature]


def _simple(prefix: str, alphabet: str, n: int, suffix: str = "") -> Callable[[], tuple[str, list[str]]]:
    def make() -> tuple[str, list[str]]:
        body = _random(alphabet, n)
        return prefix + body + suffix, [body]
    return make


def _slack_bot() -> tuple[str, list[str]]:
    body = _random(ALNUM, 24)
    return f"xoxb-{_random(string.digits, 12)}-{_random(string.digits, 13)}-{body}", [body]


def _slack_app() -> tuple[str, list[str]]:
    body = _random(HEX, 64)
    return f"xapp-1-A{_random(string.ascii_uppercase + string.digits, 10)}-{_random(string.digits, 13)}-{body}", [body]


def _slack_webhook() -> tuple[str, list[str]]:
    body = _random(ALNUM, 24)
    upper = string.ascii_uppercase + string.digits
    return f"https://hooks.slack.com/services/T{_random(upper, 8)}/B{_random(upper, 10)}/{body}", [body]


def _github_fine() -> tuple[str, list[str]]:
    first, second = _random(ALNUM, 22), _random(ALNUM, 59)
    return f"github_pat_{first}_{second}", [first, second]


def _sendgrid() -> tuple[str, list[str]]:
    first, second = _random(URLSAFE, 22), _random(URLSAFE, 43)
    return f"SG.{first}.{second}", [first, second]


# Each kind: a maker of (token, its random bodies). Lengths follow the formats as issued today.
SECRET_KINDS: dict[str, Callable[[], tuple[str, list[str]]]] = {
    "github_classic": _simple("ghp_", ALNUM, 36),
    "github_fine": _github_fine,
    "gitlab": _simple("glpat-", URLSAFE, 20),
    "stripe_live": _simple("sk_live_", ALNUM, 99),  # a modern live key: 107 characters
    "stripe_restricted": _simple("rk_live_", ALNUM, 99),
    "stripe_whsec": _simple("whsec_", ALNUM, 32),
    "slack_bot": _slack_bot,
    "slack_app": _slack_app,
    "slack_webhook": _slack_webhook,
    "google_api": _simple("AIza", URLSAFE, 35),
    "google_oauth": _simple("ya29.a0", URLSAFE, 150),
    "aws_access": _simple("AKIA", string.ascii_uppercase + "234567", 16),
    "aws_secret": _simple("", ALNUM + "+/", 40),
    "jwt": _jwt,
    "openai_project": _simple("sk-proj-", URLSAFE, 156),
    "anthropic": _simple("sk-ant-api03-", URLSAFE, 93, "AA"),
    "npm": _simple("npm_", ALNUM, 36),
    "pypi": _simple("pypi-AgEIcHlwaS5vcmc", URLSAFE, 140),
    "huggingface": _simple("hf_", ALNUM, 34),
    "sendgrid": _sendgrid,
    "cookie": _simple("", ALNUM, 40),
    "cookie2": _simple("", URLSAFE, 48),
    "s3_signature": _simple("", HEX, 64),
    "gcs_signature": _simple("", HEX, 256),
    "azure_sas": _simple("", ALNUM, 43, "%3D"),
    "ssh_private_key": lambda: _pem("OPENSSH PRIVATE KEY"),
    "rsa_private_key": lambda: _pem("RSA PRIVATE KEY"),
}


def secret_chunks(bodies: list[str]) -> list[str]:
    """The pieces of a secret whose presence anywhere counts as a leak: every CHUNK characters of each body."""
    chunks: list[str] = []
    for body in bodies:
        if len(body) < CHUNK:
            chunks.append(body)
            continue
        chunks.extend(body[i:i + CHUNK] for i in range(0, len(body) - CHUNK + 1, CHUNK))
        chunks.append(body[-CHUNK:])
    return sorted(set(chunks))


@dataclass(frozen=True)
class Names:
    """The names of one run that cases may refer to."""

    nonce: str
    local_machine: str
    local_user: str
    decoy_project: str
    private_key: str


@dataclass
class Case:
    """One case, filled in: its payload (``data``), its markers, and the secrets made for it."""

    id: str
    kind: str
    attempts: str
    about: str
    data: dict[str, Any]
    markers: list[str]
    traces: list[str] = field(default_factory=list)
    secrets: dict[str, list[str]] = field(default_factory=dict)  # kind -> the chunks that count as a leak
    filler: str = ""  # the text of its ``{{filler:N}}``, if any

    @property
    def project(self) -> str:
        """The project of a team row case (its own, so that what it breaks is its own)."""
        return f"adv-{self.id}"

    def leak_markers(self) -> list[str]:
        """What must not reach disk, a model, the team database or the agent: secrets' chunks, private words."""
        chunks = [chunk for found in self.secrets.values() for chunk in found]
        return chunks + (self.markers if self.attempts == "smuggle_private" else [])


def tag(case_id: str) -> str:
    """A short code of a case id: six hex digits of its hash."""
    return hashlib.sha1(case_id.encode()).hexdigest()[:6]


def _fill(value: Any, fill: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return fill(value)
    if isinstance(value, list):
        return [_fill(item, fill) for item in value]
    if isinstance(value, dict):
        return {key: _fill(item, fill) for key, item in value.items()}
    return value


def _filler(case_id: str, nonce: str, n: int) -> str:
    """``n`` characters of one unit naming the case, repeated (few distinct words: a full-text index takes it)."""
    unit = f"{case_id}.{nonce} "
    return (unit * (n // len(unit) + 1))[:n]


def load(names: Names, *, only: set[str] | None = None, directory: Path = SET_DIR) -> list[Case]:
    """Every case of the set (those in ``only``, when given), with its placeholders filled in."""
    cases: list[Case] = []
    for path in sorted(directory.glob("*.jsonl")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            raw = json.loads(line)
            if raw["kind"] not in KINDS or raw["attempts"] not in ATTEMPTS:
                raise ValueError(f"{path.name}:{number}: unknown kind or attempt in {raw['id']!r}")
            if only is not None and raw["id"] not in only:
                continue
            made: dict[str, tuple[str, list[str]]] = {}
            filler: dict[str, str] = {}

            def fill(text: str, raw: dict[str, Any] = raw, made: dict[str, tuple[str, list[str]]] = made,
                     filler: dict[str, str] = filler) -> str:
                def one(match: re.Match[str]) -> str:
                    name, arg = match.group(1), match.group(2)
                    if name == "id":
                        return str(raw["id"])
                    if name == "tag":
                        return tag(str(raw["id"]))
                    if name == "nonce":
                        return names.nonce
                    if name == "secret":
                        if arg not in made:
                            made[arg] = SECRET_KINDS[arg]()
                        return made[arg][0]
                    if name == "filler":
                        filler["text"] = _filler(raw["id"], names.nonce, int(arg))
                        return filler["text"]
                    if name in ("local_machine", "local_user", "decoy_project", "private_key"):
                        return str(getattr(names, name))
                    raise ValueError(f"unknown placeholder {match.group(0)} in {raw['id']!r}")
                return _PLACEHOLDER.sub(one, text)

            payload = {key: value for key, value in raw.items() if key not in ("id", "kind", "attempts", "about",
                                                                               "markers", "traces")}
            data = _fill(payload, fill)
            markers = [fill(marker) for marker in raw["markers"]]
            traces = [fill(trace) for trace in raw.get("traces", [])]
            cases.append(Case(raw["id"], raw["kind"], raw["attempts"], raw["about"], data, markers, traces,
                              {kind: secret_chunks(bodies) for kind, (_, bodies) in made.items()},
                              filler.get("text", "")))
    ids = [case.id for case in cases]
    if len(ids) != len(set(ids)) or len({tag(i) for i in ids}) != len(ids):
        raise ValueError("case ids, and their tags, must be unique")
    return cases


def iter_strings(value: Any) -> Iterator[str]:
    """Every string inside a JSON-like value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from iter_strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from iter_strings(item)
