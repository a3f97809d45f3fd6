"""Secrets never reach the worker's disk: detect-secrets' detectors and ours, at the ingest edge."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import pytest

from sessionmem.redaction import Redactor
from sessionmem.settings import SettingsError, load_settings
from sessionmem.testing.harness import open_worker

from .conftest import data_dir_contains

AWS = "AKIAIOSFODNN7EXAMPLE"
ANTHROPIC = "sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789-ABCDEFGH"
GITHUB = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"
PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAzQ8\nZmFrZSBrZXkgbWF0ZXJpYWw=\n-----END RSA PRIVATE KEY-----"


@pytest.mark.parametrize(("text", "secret", "kind"), [
    (f"export AWS_ACCESS_KEY_ID={AWS}", AWS, "aws-access-key"),
    (f"ANTHROPIC_API_KEY={ANTHROPIC}", ANTHROPIC, "anthropic-key"),
    ("OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwxyz123456", "sk-proj-abcdefghij", "api-key"),
    (f"git remote set-url origin https://x:{GITHUB}@github.com/o/r", GITHUB, ""),
    (f"token {GITHUB} end", GITHUB, "github-token"),
    (f"key:\n{PEM}\nafter", "ZmFrZSBrZXkgbWF0ZXJpYWw", "private-key"),
    ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA (cut)", "b3BlbnNzaC1rZXktdjEAAAAA", "private-key"),
    ("password=hunter2 and more", "hunter2", "secret"),
    ('config = {"db_password": "correct horse battery"}', "correct horse", "secret"),
    ("mysql --password=s3cretpw -u root", "s3cretpw", "secret"),
    ("curl -H 'Authorization: Bearer abcdef0123456789abcdef'", "abcdef0123456789abcdef", "bearer-token"),
    ("postgresql://admin:S3cr3tPass@db.example.com:5432/app", "S3cr3tPass", "url-password"),
    ("xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx", "AbCdEfGhIjKl", "slack-token"),
    ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
     "dozjgNryP4J3jVmNHl0w5N", "jwt"),
    ("GH_TOKEN github_pat_11ABCDEFG0abcdefghij_0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOP",
     "github_pat_11ABCDEFG0abcdefghij", "github-token"),
    ("REDIS_URL=redis://:s3cretRedisPw@cache:6379/0", "s3cretRedisPw", "url-password"),
    ("GITHUB_TOKEN=abc123def456ghi789 make release", "abc123def456ghi789", "secret"),
    ('{"token": "a1B2c3D4e5F6g7H8i9J0"}', "a1B2c3D4e5F6g7H8i9J0", "secret"),
    ("curl -H 'Authorization: Basic dXNlcjpwYXNzd29yZA=='", "dXNlcjpwYXNzd29yZA", "authorization"),
    ("HF_HOME=x hf_abcdefghijklmnopqrstuvwxyz12345678 y", "hf_abcdefghijklmnop", "api-token"),
    ("vault login hvs.CAESIJabcdefghijklmnopqrstuvwxyz", "hvs.CAESIJabcdefghij", "api-token"),
    ("mysql -u root -pS3cretPw shop", "S3cretPw", "password"),
    ("machine api.example.com login bob password hunter22", "hunter22", "password"),
    ("curl -sS -u deploy:S3cretDeployPw https://ci.example.com/api", "S3cretDeployPw", "password"),
    ("curl --user 'bob:hunter22x' https://x", "hunter22x", "password"),
    ("sshpass -p 'Hunter2Pw!' ssh admin@host", "Hunter2Pw!", "password"),
    ("docker login -u me -p Dk3rPassw0rd registry.example.com", "Dk3rPassw0rd", "password"),
    ("(cd app && mysql -uroot -pS3cretPw shop)", "S3cretPw", "password"),  # the command's word after punctuation
    ("-curl -u deploy:S3cretDeployPw https://x", "S3cretDeployPw", "password"),
    ("curl -H 'X-API-Key: abcdef0123456789' https://api.example.com", "abcdef0123456789", "api-key"),
    ('{"auths": {"https://index.docker.io/v1/": {"auth": "dXNlcjpwYXNzd29yZDEyMw=="}}}', "dXNlcjpwYXNz", "api-key"),
    ("//registry.npmjs.org/:_authToken=npm_abcdefghijklmnopqrstuvwxyz0123456789", "npm_abcdefghijklmnop", ""),
    # The end of a key block whose start was cut away before the worker saw it (a hook's cut).
    ("\n…[sessionmem: 5000 characters elided]…\nMIIEowIBAAKCAQEAzQ8abcdefghijklmnopqrst\n"
     "ZmFrZSBrZXkgbWF0ZXJpYWw=\n-----END RSA PRIVATE KEY-----\nafter", "ZmFrZSBrZXkgbWF0ZXJpYWw", "private-key"),
    # Half a token at a cut: no pattern knows it any more.
    ("x ghp_A1b2C3d4E5\n…[sessionmem: 40036 characters elided]…\nF6g7H8i9J0k1 y", "A1b2C3d4E5", "cut"),
])
def test_secrets_are_redacted(text: str, secret: str, kind: str) -> None:
    redacted = Redactor().text(text)
    assert secret not in redacted and "[REDACTED:" in redacted
    assert kind == "" or f"[REDACTED:{kind}]" in redacted


@pytest.mark.parametrize("text", [
    "def get_password(user): return lookup(user)",
    "password: None",
    'api_key = os.environ["API_KEY"]',
    "for key, value in items.items():",
    "monkey = banana",
    "sk-learn is a library; pip install scikit-learn",
    "run task-abcdefghijklmnopqrstuvwxyz01 then desk-0123456789abcdefghijklmn",  # "sk-" inside a word
    "id=xeyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0",  # "eyJ" inside a run of token characters
    "Read /home/dev/calcproj/calc.py (42 lines)",
    "if password == expected: return token",
    "response = client.create(max_tokens=4096, input_tokens: 5)",
    "params: { _csrf_token: csrfToken }, timePerToken := time.Second / rate, pad_token = tokenizer.eos_token",
    'print(f"Processing token: \'{token}\'") TOKEN="$(cat ~/.config/token)"',
    "mysql -u root -p shop < dump.sql",
    "curl -u $USER:$PASS https://x; curl -u \"${CREDS}\" https://y",
    "docker login -u me --password-stdin < pw.txt; docker login -p $DOCKER_PW",
    "sshpass -f ~/.pw ssh host; sshpass -p $PW ssh host",
    "libmysql -pedantic -o out; xcurl -u a:bcdefgh; my_docker login -p Dk3rPassw0rd",  # inside another word
    "apikey = get_api_key_from_env(); the api-key header is required",
    " 398 twilio-api-key: CHAT_LOGS/c7d2069e-c561-4759-8adf-b0745be78c29.jsonl",  # grep's answer, in the corpus
])
def test_ordinary_code_is_left_alone(text: str) -> None:
    assert Redactor().text(text) == text


SESSION = "0b1c2d3e-4f56-4789-abcd-ef0123456789"  # a session id: the name of a transcript file


@pytest.mark.parametrize("text", [
    # Transcript paths, as Claude Code names them: the project's folder with its slashes made dashes,
    # then the session id. A user "sk" put "-sk-" there, and the api-key detector took the rest for a key.
    f"read the full transcript at: /Users/alice/.claude/projects/-Users-alice-src-app/{SESSION}.jsonl",
    f"/Users/sk/.claude/projects/-Users-sk-Documents-GitHub-my-application/{SESSION}.jsonl",
    f"/home/sk/.claude/projects/-home-sk-work-sk-learn-experiments-2024/{SESSION}/subagents/agent-a1b2c3d4.jsonl",
    f'{{"transcript_path": "/Users/sk/.claude/projects/-Users-sk-code-payments-service-v2/{SESSION}.jsonl"}}',
    f"claude --resume {SESSION} # ~/.claude/projects/-Users-bob-sk-ant-colony-simulation-2/{SESSION}.jsonl",
    # Folders and files named like a key's prefix, in any position of a path.
    "/home/dev/task-ant-colony-simulation-2024/main.py",  # "sk-ant-" inside a word
    "cd sk-learn-experiments-v2-final/ && ls; cat ./sk-learn-experiments-v2-final/train.py",
    r"C:\work\sk-learn-experiments-v2-final\train.py",
    # A test's id names a scope with "::", not an assignment: "Key::" is no "key: value".
    "tests/test_redaction.py::TestAPIKeyRedaction::test_anthropic_key PASSED",
    "PASSED tests/test_auth.py::test_password::test_hashing_is_slow[argon2]",
])
def test_paths_are_left_alone(text: str) -> None:
    assert Redactor().text(text) == text
    value = {"transcript_path": text, "files": [text]}
    assert Redactor().value(value, msgspec.json.encode(value)) is value


@pytest.mark.parametrize(("text", "secret", "kind"), [
    # Keys where a path could be: at a line's start, after '=', ':', a quote, a space, in a URL's query.
    ("sk-proj-abcdefghijklmnopqrstuvwxyz123456\n", "abcdefghijklmnop", "api-key"),
    ("OPENAI_API_KEY=sk-abcdefghijklmnopqrstuvwxyz0123 ./run.sh /tmp/out", "abcdefghijklmnop", "api-key"),
    ("curl 'https://api.example.com/v1/models?key=sk-abcdefghijklmnopqrstuvwxyz0123&x=1'", "abcdefghijklmnop",
     "api-key"),
    ('cat /home/u/app/.env\nANTHROPIC_API_KEY="sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123"', "api03-abcdefgh", ""),
    # Inside JSON written as a string (a log line, a transcript read as a file): after an escaped line
    # break, and before an escaped quote.
    ('{"message": "my key is\\nsk-ant-api03-abcdefghijklmnopqrstuvwxyz0123\\" ok"}', "api03-abcdefgh",
     "anthropic-key"),
    ('\\"sk-proj-abcdefghijklmnopqrstuvwxyz123456\\"', "abcdefghijklmnop", "api-key"),
    # A key next to a transcript path is still a key.
    (f"/Users/sk/.claude/projects/-Users-sk-app/{SESSION}.jsonl sk-proj-abcdefghijklmnopqrstuvwxyz123456",
     "abcdefghijklmnop", "api-key"),
    # A single ':' still assigns.
    ("TestAPIKey: hunter2hunter2", "hunter2hunter2", "secret"),
    ("GITHUB_TOKEN: abcd1234efgh5678ijkl", "abcd1234efgh5678ijkl", "secret"),
])
def test_keys_in_the_places_of_paths_are_still_redacted(text: str, secret: str, kind: str) -> None:
    redacted = Redactor().text(text)
    assert secret not in redacted and f"[REDACTED:{kind}" in redacted

def test_positions_are_characters_after_text_beyond_ascii() -> None:
    # The trigger automaton searches UTF-8 underneath: a keyword after multi-byte characters
    # must still be found where it is, or the assignment after it is not recognized.
    text = 'é😀 naïve — password=hunter2secret; 日本語 api_key: "abcd1234efgh" --password s3cr3tvalue'
    assert Redactor().text(text) == ('é😀 naïve — password=[REDACTED:secret]; 日本語 api_key: "[REDACTED:secret]"'
                                     " --password [REDACTED:secret]")


def test_structured_values_and_custom_patterns() -> None:
    value = {"env": {"API_KEY": "abc123def456", "tokenizer": "bert", "access_token": "zzz-yyy-xxx"},
             "cmd": "ls", "out": "password=hunter2", "input_tokens": 5}
    redacted = Redactor().value(value, msgspec.json.encode(value))
    assert redacted == {"env": {"API_KEY": "[REDACTED:secret]", "tokenizer": "bert",
                                "access_token": "[REDACTED:secret]"},
                        "cmd": "ls", "out": "password=[REDACTED:secret]", "input_tokens": 5}
    about = {"pwd": "/home/dev/app", "passwordPolicy": "strong", "secretName": "tls-certs",
             "password_reset_url": "https://example.com/reset", "password_min_length": "8"}
    assert Redactor().value(about, msgspec.json.encode(about)) is about  # about secrets, not secrets
    clean = {"file_path": "/p/a.py", "content": "x = 1\n"}
    assert Redactor().value(clean, msgspec.json.encode(clean)) is clean  # untouched, not even copied
    custom = Redactor(extra_patterns=[r"ACME-[0-9]{6}", r"internal-id=(\w+)"])
    assert custom.text("ticket ACME-123456, internal-id=zz9") == "ticket [REDACTED:custom], internal-id=[REDACTED:custom]"
    assert Redactor(enabled=False).text(f"key {AWS}") == f"key {AWS}"


def test_structured_values_are_redacted_string_by_string() -> None:
    """Each string as the text it is: not through its JSON, where a line starts after the
    two characters ``\\n`` and a file's quotes are ``\\"`` (both hid secrets once)."""
    env_file = "# OpenAI\nsk-proj-abcdefghijklmnopqrstuvwxyz0123456789\nBearer abcdefghijklmnop0123\n"
    json_file = '{\n  "api_key": "k3y-value-1",\n  "password": "pw-value-2"\n}\n'
    value = {"file": {"content": env_file}, "other": [{"content": json_file}],
             "stdout": "password=abcd1234\nuser=bob\nhost=db.internal port=5432"}
    redacted = Redactor().value(value, msgspec.json.encode(value))
    assert redacted == {
        "file": {"content": "# OpenAI\n[REDACTED:api-key]\nBearer [REDACTED:bearer-token]\n"},
        "other": [{"content": '{\n  "api_key": "[REDACTED:secret]",\n  "password": "[REDACTED:secret]"\n}\n'}],
        "stdout": "password=[REDACTED:secret]\nuser=bob\nhost=db.internal port=5432",  # the next lines kept
    }


class CountingRedactor(Redactor):
    """Counts the strings it scans one by one."""

    def __init__(self) -> None:
        super().__init__()
        self.scanned = 0

    def text(self, text: str) -> str:
        self.scanned += 1
        return super().text(text)


def test_a_value_whose_only_trigger_is_a_flag_is_not_scanned_string_by_string() -> None:
    """``--`` starts a secret only after a keyword (``--password x``): a command line with flags and no
    keyword anywhere in its value (most of them) costs its JSON's one scan, not one a string."""
    redactor = CountingRedactor()
    command = {"command": "git log --oneline --graph -- src/", "description": "history --since"}
    assert redactor.value(command, msgspec.json.encode(command)) is command and redactor.scanned == 0
    flagged = {"command": "deploy --password hunter2x9 --verbose", "description": "ship it"}
    assert redactor.value(flagged, msgspec.json.encode(flagged)) == {
        "command": "deploy --password [REDACTED:secret] --verbose", "description": "ship it"}
    assert redactor.scanned == 1


def test_custom_patterns_and_cuts_reach_every_string_of_a_structured_value() -> None:
    """A structured value with no built-in trigger word is redacted too: a ``redact_patterns`` match in
    a Bash ``stdout``, and half a token where a hook cut that stdout to head and tail, are not stored."""
    from sessionmem.protocol.limits import shorten_strings

    custom = Redactor(extra_patterns=[r"ACME-[0-9]{6}"])
    value = {"stdout": "deployed ticket ACME-123456", "interrupted": False}
    assert custom.value(value, msgspec.json.encode(value)) == {"stdout": "deployed ticket [REDACTED:custom]",
                                                              "interrupted": False}
    half_token = "Z9x8W7v6U5t4S3r2Q1p0" * 10  # nothing a detector knows: only the cut says it was cut
    cut = shorten_strings({"stdout": "log line\n" * 50 + half_token + " done"}, 300)
    redacted = Redactor().value(cut, msgspec.json.encode(cut))
    assert "Z9x8W7v6" not in redacted["stdout"] and "[REDACTED:cut] done" in redacted["stdout"]
    assert redacted["stdout"].startswith("log line\n")
    plain = {"stdout": "log line\n" * 50, "files": ["a.py"]}
    assert Redactor().value(plain, msgspec.json.encode(plain)) is plain  # nothing to find: not even copied


def test_a_long_run_repeating_a_keyword_is_tried_near_its_end_only() -> None:
    """``"pwd" * 20000`` once made the keyword rule run ~40 s on the Trio thread (a try at every
    keyword, each scanning the rest of the run): only keywords a name's length from the run's end
    can be followed by ``=`` or ``:``, and only those are tried. (bench/redaction_worst.py times it.)"""
    from sessionmem import redaction

    patterns = redaction.load_patterns()

    class Counting:
        tries = 0
        groups = patterns.keyword_at.groups

        def match(self, text: str, start: int) -> object:
            Counting.tries += 1
            return patterns.keyword_at.match(text, start)

    run = "pwd" * 20000
    candidates = list(range(0, len(run), 3))
    assert redaction._assigned_values(Counting(), run + "=hunter22 ok", candidates) == run + "=[REDACTED:secret] ok"
    assert Counting.tries <= redaction.NAME_AFTER_KEYWORD // 3 + 1
    assert Redactor().text("eyJ" * 5000) == "eyJ" * 5000  # not a token: no JWT inside a run


def test_a_name_ending_in_token_is_tried_where_token_is_written_only() -> None:
    """The token rule starts with a run of word characters: run over the whole text it made 64 steps a
    character (21 % of redaction's time on the corpus). It is tried at the start of each word that
    holds ``token``, and finds what it found before."""
    from sessionmem import redaction

    patterns = redaction.load_patterns()
    tries: list[int] = []

    class Counting:
        groups = patterns.token_at.groups

        def match(self, text: str, start: int) -> object:
            tries.append(start)
            return patterns.token_at.match(text, start)

    prose = "word " * 2000
    text = prose + 'export GITHUB_TOKEN=abcd1234efgh5678ijkl\n{"accessToken": "A1b2C3d4E5f6G7h8"} csrf_token = csrfToken'
    words = [match.start() for match in re.finditer("(?i)token", text)]
    assert redaction._assigned_values(Counting(), text, words) == (
        prose + 'export GITHUB_TOKEN=[REDACTED:secret]\n{"accessToken": "[REDACTED:secret]"} csrf_token = csrfToken')
    assert tries == [text.index("GITHUB"), text.index("accessToken"), text.index("csrf_token"), text.index("csrfToken")]
    assert Redactor().text(text) == redaction._assigned_values(patterns.token_at, text, words)


def test_bad_custom_patterns_are_refused_at_start(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="not a regular expression"):
        load_settings({"SESSIONMEM_REDACT_PATTERNS": '["(unclosed"]'}, data_dir=str(tmp_path))
    settings = load_settings({"SESSIONMEM_REDACT_PATTERNS": '["a{2,3}", "b"]'}, data_dir=str(tmp_path))
    assert settings.redact_patterns == ("a{2,3}", "b")


async def test_no_secret_reaches_the_data_dir(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    async with open_worker(data_dir, batch_quiet_s=0.05) as worker:
        await worker.post("/api/sessions/init", {"claudeSessionId": "s", "cwd": "/w/p",
                                                 "prompt": f"deploy with AWS_ACCESS_KEY_ID={AWS} please"})
        await worker.post("/api/sessions/observations", {
            "claudeSessionId": "s", "cwd": "/w/p", "tool_name": "Bash", "tool_use_id": "t1",
            "tool_input": {"command": f"curl -H 'x-api-key: {ANTHROPIC}' https://api"},
            "tool_response": {"stdout": f"{PEM}\nok", "stderr": f"warning: {GITHUB}"}})
        await worker.post("/api/sessions/observations", {
            "claudeSessionId": "s", "cwd": "/w/p", "tool_name": "Read", "tool_use_id": "t2",
            "tool_input": {"file_path": "/w/p/.env"}, "tool_response": "DB_PASSWORD=correcthorse42\nDEBUG=1"})
        await worker.post("/api/sessions/summarize", {"claudeSessionId": "s",
                                                      "last_assistant_message": f"Used password=hunter2x, {AWS}"})
        await worker.wait_idle()
        detail = await worker.get("/api/observations/2")
        assert detail["toolResponse"] == "DB_PASSWORD=[REDACTED:secret]\nDEBUG=1"
    for secret in (AWS, ANTHROPIC, GITHUB, "ZmFrZSBrZXkgbWF0ZXJpYWw", "correcthorse42", "hunter2x"):
        assert data_dir_contains(data_dir, secret.encode()) == [], secret
    assert data_dir_contains(data_dir, b"[REDACTED:aws-access-key]")


def test_a_huge_text_is_redacted_only_where_it_is_kept() -> None:
    """Megabytes cut to head and tail are redacted in the kept ends with a margin, never whole: the
    worker's single thread pays for ~cap characters however long the text. A secret across a cut
    or cut by a window's edge is gone all the same."""
    from sessionmem.protocol.fields import REDACT_MARGIN, clean_text
    from sessionmem.protocol.limits import FIELD_CAP, head_tail

    redactor = Redactor()
    seen: list[int] = []

    def redact(text: str) -> str:
        seen.append(len(text))
        return redactor.text(text)

    plain = "".join(f"line {n}: nothing to hide here\n" for n in range(200_000))  # ~6 MB
    assert clean_text(plain, FIELD_CAP, redact) == head_tail(plain, FIELD_CAP)  # the same cut as ever
    assert max(seen) <= FIELD_CAP // 2 + REDACT_MARGIN
    keep = (FIELD_CAP - 64) // 2
    for at in (keep - 10, len(plain) - keep - 10,  # across the head's cut, across the tail's cut
               len(plain) - keep - REDACT_MARGIN - 10):  # across the tail window's own edge
        text = plain[:at] + AWS + plain[at + len(AWS):]
        cleaned = clean_text(text, FIELD_CAP, redact)
        assert not any(AWS[i:i + 8] in cleaned for i in range(len(AWS) - 7)), at  # no part of it either


# -- token formats, whole -------------------------------------------------------------------------

_ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


def _random(length: int, alphabet: str = _ALNUM, *, seed: int) -> str:
    """A token body nobody else writes (the same each run)."""
    import random

    chance = random.Random(seed)
    return "".join(chance.choice(alphabet) for _ in range(length))


def _discord_token() -> str:
    import base64

    bot_id = base64.urlsafe_b64encode(b"1187654321098765432").decode().rstrip("=")  # a bot's numeric id
    return f"{bot_id}.{_random(6, seed=40)}.{_random(38, _ALNUM + '_-', seed=41)}"


_B64 = _ALNUM + "+/"
_URL = _ALNUM + "_-"
SERVICE_ACCOUNT_KEY = _random(1600, _B64, seed=30)
# (format, text with {token} where the token goes, token, characters of it that may stay: its public prefix)
TOKENS = [
    ("google api key", "const key = '{token}';", "AIza" + _random(35, _URL, seed=1), 4),
    ("google oauth access token", "curl -H 'x: {token}' https://www.googleapis.com", "ya29." + _random(180, _URL, seed=2), 5),
    ("google oauth refresh token", '{{"refresh_tok": "{token}"}}', "1//0" + _random(100, _URL, seed=3), 4),
    ("aws access key id", "id {token} here", "AKIA" + _random(16, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", seed=4), 4),
    ("aws secret key, ini", "[default]\naws_secret_access_key = {token}\n", _random(40, _B64, seed=5), 0),
    ("aws secret key, cli", "aws configure set aws_secret_access_key {token}", _random(40, _B64, seed=6), 0),
    ("aws secret key, sts json", '{{"Credentials": {{"SecretAccessKey": "{token}"}}}}', _random(40, _B64, seed=7), 0),
    ("aws session token, env", "export AWS_SESSION_TOKEN={token}", "IQoJb3JpZ2luX2Vj" + _random(900, _B64, seed=8), 0),
    ("aws session token, sts json", '{{"SessionToken": "{token}"}}', "IQoJb3JpZ2luX2Vj" + _random(900, _B64, seed=9), 0),
    ("azure storage key", "DefaultEndpointsProtocol=https;AccountName=x;AccountKey={token};EndpointSuffix=core.windows.net",
     _random(86, _B64, seed=10) + "==", 0),
    ("azure sas sig=", "https://acct.blob.core.windows.net/c/b.txt?sv=2022-11-02&sp=r&se=2026-12-01&sig={token}",
     _random(40, _ALNUM, seed=11) + "%2B" + _random(8, _ALNUM, seed=12) + "%3D", 0),
    ("gcp service-account key", '{{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\\n{token}\\n'
     '-----END PRIVATE KEY-----\\n", "client_email": "x@p.iam.gserviceaccount.com"}}', SERVICE_ACCOUNT_KEY, 0),
    ("slack bot token", "SLACK={token}", "xoxb-" + _random(13, "0123456789", seed=13) + "-" +
     _random(13, "0123456789", seed=14) + "-" + _random(24, seed=15), 4),
    ("slack user token", "token is {token}", "xoxp-" + _random(12, "0123456789", seed=16) + "-" +
     _random(12, "0123456789", seed=17) + "-" + _random(12, "0123456789", seed=18) + "-" + _random(32, seed=19), 4),
    ("slack app-level token", "SLACK_APP_TOKEN {token}", "xapp-1-A" + _random(10, seed=20) + "-" +
     _random(13, "0123456789", seed=21) + "-" + _random(64, "0123456789abcdef", seed=22), 5),
    ("discord bot token", "client.run('{token}')", _discord_token(), 0),
    ("telegram bot token", "https://api.telegram.org/bot{token}/getMe", "123456789:AA" + _random(33, _URL, seed=23), 0),
    ("stripe secret key, long", "charge with {token} now", "sk_live_" + _random(99, seed=24), 8),
    ("stripe restricted key", "{token}", "rk_live_" + _random(99, seed=25), 8),
    ("stripe publishable key", "pk = {token}", "pk_live_" + _random(99, seed=26), 8),
    ("stripe test key", "key {token}", "sk_test_" + _random(99, seed=27), 8),
    ("webhook signing secret", "STRIPE_WEBHOOK={token}", "whsec_" + _random(32, seed=28), 6),
    ("github classic token", "gh auth login --with-token <<< {token}", "ghp_" + _random(36, seed=31), 4),
    ("github oauth token", "{token}", "gho_" + _random(36, seed=32), 4),
    ("github app token, long", "x-access-token:{token}@github.com", "ghs_" + _random(120, seed=33), 4),
    ("github fine-grained token", "{token}", "github_pat_11" + _random(80, _ALNUM + "_", seed=34), 11),
    ("gitlab token", "PRIVATE-TOKEN: {token}", "glpat-" + _random(20, _URL, seed=35), 6),
    ("gitlab routable token", "{token}", "glpat-" + _random(27, _URL, seed=36) + ".01.0" + _random(9, seed=37), 6),
    ("npm token", "//registry.npmjs.org/:_authToken={token}", "npm_" + _random(36, seed=38), 4),
    ("pypi token", "twine upload -p {token} dist/*", "pypi-AgEIcHlwaS5vcmc" + _random(160, _URL, seed=39), 5),
    ("openai project key", "OPENAI={token}", "sk-proj-" + _random(156, _URL, seed=42), 3),
    ("anthropic key", "x-api-key {token}", "sk-ant-api03-" + _random(95, _URL, seed=43) + "-AAAAAA", 7),
    ("jwt", "token: {token}", "eyJhbGciOiJSUzI1NiJ9." + _random(300, _URL, seed=44) + "." + _random(342, _URL, seed=45), 3),
    ("cookie header", "curl -H 'Cookie: session={token}; theme=dark' https://x", _random(64, _URL, seed=46), 0),
    ("set-cookie header", "< Set-Cookie: __Host-sid={token}; Path=/; Secure; HttpOnly", _random(64, _URL, seed=47), 0),
    ("curl --cookie", "curl --cookie 'sid={token}' https://x", _random(48, _URL, seed=48), 0),
    ("s3 presigned signature", "https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature={token}",
     _random(64, "0123456789abcdef", seed=49), 0),
    ("s3 presigned session token", "https://b.s3.amazonaws.com/k?X-Amz-Security-Token={token}&X-Amz-Expires=60",
     _random(700, _ALNUM, seed=50) + "%2F" + _random(20, _ALNUM, seed=51), 0),
    ("gcs signed url", "https://storage.googleapis.com/b/o?X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Signature={token}",
     _random(512, "0123456789abcdef", seed=52), 0),
    ("cloudfront signature", "https://d1.cloudfront.net/v.mp4?Expires=1&Signature={token}&Key-Pair-Id=K2",
     _random(300, _URL + "~", seed=53), 0),
    ("sigv4 authorization", "Authorization: AWS4-HMAC-SHA256 Credential=x/20261201/us-east-1/s3/aws4_request, "
     "SignedHeaders=host, Signature={token}", _random(64, "0123456789abcdef", seed=54), 0),
    ("bearer token, long", "Authorization: Bearer {token}", _random(1200, _URL + ".", seed=55), 0),
    ("private key block", "-----BEGIN EC PRIVATE KEY-----\n{token}\n-----END EC PRIVATE KEY-----",
     _random(64, _B64, seed=56) + "\n" + _random(40, _B64, seed=57), 0),
    ("password, long", "DB_PASSWORD={token}\n", _random(600, _URL, seed=58), 0),
    ("quoted password, long", 'password = "{token}"', _random(600, _URL, seed=59), 0),
    ("token assigned, long", "GITHUB_TOKEN={token} make", _random(500, _ALNUM, seed=60), 0),
]
KEPT_RUN = 6  # no run of this many characters of a token (beyond its public prefix) may survive
# A whole store (a data directory, a database dump) also holds random hex ids and hashes: a run of six characters
# of a 512-character hex token turns up among them by chance now and then.
# Twelve cannot (16**-12 a position).
KEPT_RUN_IN_STORE = 12


def kept_runs(token: str, prefix: int, text: str, run: int = KEPT_RUN) -> list[str]:
    """The runs of ``run`` characters of ``token`` past its first ``prefix`` found in ``text``."""
    return [token[at:at + run] for at in range(prefix, len(token) - run + 1) if token[at:at + run] in text]


@pytest.mark.parametrize(("text", "token", "prefix"), [pytest.param(text, token, prefix, id=name)
                                                       for name, text, token, prefix in TOKENS])
def test_each_token_format_is_redacted_whole(text: str, token: str, prefix: int) -> None:
    """The whole token, however long: no run of its characters is kept (a long Stripe key once kept 75 of its
    99; Google, Slack app-level, Discord, Telegram tokens and webhook secrets were kept whole)."""
    written = text.format(token=token)
    assert token in written
    redacted = Redactor().text(written)
    assert kept_runs(token, prefix, redacted) == [], redacted
    value = {"stdout": written, "env": {"X": written}}
    redacted_value = Redactor().value(value, msgspec.json.encode(value))
    assert kept_runs(token, prefix, msgspec.json.encode(redacted_value).decode()) == [], redacted_value


def test_secret_headers_in_structured_values_are_redacted_by_their_name() -> None:
    value = {"headers": {"Cookie": "sid=abcdef0123456789", "Set-Cookie": "a=b0c1d2e3f4; Path=/", "Accept": "x/y"}}
    assert Redactor().value(value, msgspec.json.encode(value)) == {
        "headers": {"Cookie": "[REDACTED:secret]", "Set-Cookie": "[REDACTED:secret]", "Accept": "x/y"}}


@pytest.mark.parametrize("text", [
    "the cookie: it is a small cake",  # the word, not a header
    "document.cookie is read by the page; cookies: 3",
    "sig = inspect.signature(fn); f(sig=inspect.signature(g))",
    "def verify(signature=None): pass",
    "MTA settings and NzA here; OTg8 x",  # Discord's prefixes, in no token
    "Error:A problem occurred at 12:AM",
    "ya29 is a prefix; AIza too",
    "see the whsec_ prefix and sk_live_ keys in the docs",
])
def test_new_formats_leave_ordinary_text_alone(text: str) -> None:
    assert Redactor().text(text) == text



# A key with no name beside it: random base64 (made here with a fixed seed; no real key).
def _random_key(length: int, seed: int) -> str:
    import base64
    import random

    return base64.b64encode(random.Random(seed).randbytes(length)).decode()[:length]


@pytest.mark.parametrize("text", [
    "old key: {key}", "{key}", "rotate it:\n    {key}\n", '{{"k": "{key}"}}', "aws configure {key} done",
])
def test_a_random_key_with_no_name_is_redacted(text: str) -> None:
    for seed in range(20):
        key = _random_key(40, seed)
        if not any(character.isdigit() for character in key):
            continue  # a run with no digit is left (so are about 1 in 100 random keys, by their entropy)
        assert key not in Redactor().text(text.format(key=key)), key


@pytest.mark.parametrize("text", [
    "getUserAccountSettingsFromDatabase2024", "HandleIncomingWebSocketMessageV2Handler",
    "commit 3f2a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a", "src/components/SomethingLong/index3.tsx",
    "AbstractSingletonProxyFactoryBean2Impl9", "kubernetesDeploymentConfigurationV1beta1",
    "test_redaction_of_the_whole_token_format_2024", "/usr/lib/python3.11/site-packages/abc/def/x.py",
    "sha512-iDOkPq2eH57bILCMFmfvYtOmZLcetwfAOzm+VEUZlx0=",  # an integrity hash (public), named by its prefix
])
def test_long_words_paths_and_digests_are_not_random_keys(text: str) -> None:
    assert Redactor().text(text) == text


# Private spans as tools print them: entities (a web page), JSON escapes (gh --json), percent-encoding
# (a URL), full-width brackets (an input method), and doubly encoded.
ENCODED_PRIVATE = {
    "html entities": "&lt;private&gt;ENC-ALPHA-1&lt;/private&gt;",
    "numeric entities": "&#60;private&#62;ENC-BETA-2&#x3C;/private&#x3e;",
    "json escapes": "\\u003cprivate\\u003eENC-GAMMA-3\\u003c/private\\u003e",
    "percent": "%3Cprivate%3EENC-DELTA-4%3C%2Fprivate%3E",
    "full-width": "＜private＞ENC-EPSILON-5＜/private＞",
    "full-width letters": "＜ｐｒｉｖａｔｅ＞ENC-ZETA-6＜／ｐｒｉｖａｔｅ＞",
    "double entities": "&amp;lt;private&amp;gt;ENC-ETA-7&amp;lt;/private&amp;gt;",
    "unterminated, encoded": "keep this &lt;private&gt;ENC-THETA-8 and the rest",
}


async def test_an_import_stores_no_secret_and_no_private_span_whatever_redact_secrets_says(tmp_path: Path) -> None:
    """``redact_secrets=false`` is this machine's choice for what it records itself; a file from elsewhere
    (``sessionmem import`` posts it here) is redacted by the default rules all the same, and its private
    spans, however encoded, are not stored."""
    every_token = "\n".join(text.format(token=token) for _, text, token, _ in TOKENS)
    private = "\n".join(ENCODED_PRIVATE.values())
    records = [
        {"kind": "session", "claudeSessionId": "imp", "project": "impproj", "firstPrompt": f"deploy {private}",
         "createdAt": 1795550000, "updatedAt": 1795550000},
        {"kind": "prompt", "claudeSessionId": "imp", "promptNumber": 1, "text": f"deploy {every_token}",
         "createdAt": 1795550000},
        {"kind": "observation", "claudeSessionId": "imp", "project": "impproj", "promptNumber": 1, "toolName": "Bash",
         "toolUseId": "i1", "type": "change", "title": "Deployed the app", "createdAt": 1795550001,
         "facts": [*(text.format(token=token) for _, text, token, _ in TOKENS), private],  # each within a fact's cap
         "narrative": private},
        {"kind": "summary", "claudeSessionId": "imp", "project": "impproj", "promptNumber": 1,
         "createdAt": 1795550002, "request": "deploy", "completed": every_token, "notes": private},
    ]
    data = tmp_path / "data"
    async with open_worker(data, embedder="none", batch_quiet_s=0.05, redact_secrets=False) as worker:
        counts = (await worker.request("POST", "/api/import", {"records": records})).json()
        assert counts["observations"] == 1 and counts["summaries"] == 1
        exported = (await worker.request("GET", "/api/export?project=impproj")).body.decode()
        assert "Deployed the app" in exported and "[REDACTED:" in exported
        assert "keep this" in exported  # what precedes an unterminated span is kept
    stored = b"".join(path.read_bytes() for path in data.rglob("*") if path.is_file()).decode("utf-8", "replace")
    found = {name: kept[:3] for name, _, token, prefix in TOKENS
             if (kept := kept_runs(token, prefix, stored, KEPT_RUN_IN_STORE))}
    found |= {name: "ENC-" for name, text in ENCODED_PRIVATE.items() if text.split("ENC-")[1][:7] in stored}
    assert found == {}, found
