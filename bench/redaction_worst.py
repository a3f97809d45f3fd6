"""The redactor's worst cases: a field that repeats one trigger word, 16 and 64 KiB long.

Redaction runs on the worker's Trio thread for every field an event carries (up to the
64 KiB field cap through the hooks), so its time on adversarial text is how long one
event can hold every other request. Each unit (a keyword, a token prefix, a separator)
is repeated to fill the field, redacted as a plain text and as a tool value; the
slowest are printed. Linear work shows as about 4x between the two sizes.

Usage: ``.venv/bin/python bench/redaction_worst.py [--top N]``
"""

from __future__ import annotations

import argparse
import time

import msgspec

from sessionmem.redaction import KEYWORD_TRIGGERS, Redactor

UNITS = (*KEYWORD_TRIGGERS, "password", "secret", "api_key", "token", "--password ", "--", "://", "://:", "sk-",
         "sk-ant-", "PRIVATE KEY", "-----BEGIN RSA PRIVATE KEY-----", "bearer ", "Bearer", "eyJ", "eyJa.", "AKIA",
         "aws", "AccountKey=", "ghp_", "github_pat_", "glpat-", "-us1", "_authToken", "T3BlbkFJ", "pypi-Ag", "SG.",
         "xox", "hooks.slack.com", "sq0csp-", "k_live_", "password=", "password:", '"token":', '"a_token": "',
         "a:b@", "://a:", "PuTTY-User-Key-File-2", "contrasena", "passwd=x ", "=", '"', "\\", "curl ", "curl -u a:",
         "sshpass -p ", "docker login ", "X-API-Key: ", "api-key", '"auth": "', "AIza", "ya29.", "1//0", "GOCSPX-",
         "xapp-", "xoxe.xoxp-", "MTE", "MTE4NzY1NDMy.", "MTE4NzY1NDMyMTA5ODc2NTQzMg.GhIjKl.", "1234567:A", ":A",
         "whsec_", "sk_live_", "k_test_", "ghs_", "glpat-x.", "sig=", "&sig=", "Signature=", "X-Amz-Signature=",
         "X-Amz-Security-Token=", "Cookie: ", "Cookie: a=", "Set-Cookie: a=b; ", "--cookie ", "ookie",
         "aws_secret_access_key ", "SecretAccessKey: ",
         # Random keys with no name (the high-entropy rule): one long run, and many keys a space apart.
         "q8Zr2vW+Lx0b/N4mKc7TfYh1Ja9Pe5Ud3Gs6Ro", "q8Zr2vW+Lx0b/N4mKc7TfYh1Ja9Pe5Ud3Gs6Ro ", "é q8Zr2vW+Lx0b/N4mKc7TfYh1Ja9Pe5Ud3G ")
# Units repeated, then what completes their pattern (a pattern that backtracks over the whole run
# from every start, as detect-secrets' npm and OpenAI ones do, takes 14 s on "//" x 32,000 + "_authToken").
SUFFIXED = (("//", "_authToken"), ("sk-", "T3BlbkFJ"), ("mysql ", "-p"), ("curl ", " -u a:b"), ("docker login ", " -p x"),
            ("AAAA\n", "-----END RSA PRIVATE KEY-----"),
            ("x", "\n…[sessionmem: 9 characters elided]…\n"), ("password=", "("), ("token=a1", "("), ("a", "=("),
            ("0", ":A" + "A" * 40), ("MTE4", ".abcdef." + "x" * 30))
SIZES = (16 * 1024, 64 * 1024)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=10, help="how many of the slowest to print")
    args = parser.parse_args()
    redactor = Redactor()
    redactor.load()
    timings: list[tuple[float, str, int]] = []
    for unit, suffix in [(unit, "") for unit in UNITS] + list(SUFFIXED):
        for size in SIZES:
            text = unit * (size // len(unit)) + suffix
            started = time.perf_counter()
            redactor.text(text)
            as_text = time.perf_counter() - started
            value = {"file": {"content": text}}
            encoded = msgspec.json.encode(value)
            started = time.perf_counter()
            redactor.value(value, encoded)
            as_value = time.perf_counter() - started
            timings.append((max(as_text, as_value), unit + (f" ... {suffix!r}" if suffix else ""), size))
    timings.sort(reverse=True)
    print(f"{len(UNITS) + len(SUFFIXED)} units x {len(SIZES)} sizes; the slowest (the longer of text and value):")
    for seconds, unit, size in timings[: args.top]:
        print(f"  {seconds * 1000:8.1f} ms  {unit!r} x {size // 1024} KiB")


if __name__ == "__main__":
    main()
