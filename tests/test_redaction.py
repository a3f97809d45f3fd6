"""Secrets never reach the worker's disk: detect-secrets' detectors and ours, at the ingest edge."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import pytest

from sessionmem.server.redaction import Redactor
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
    from sessionmem.server import redaction

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
    from sessionmem.server import redaction

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
