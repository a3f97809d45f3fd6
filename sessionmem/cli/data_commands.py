"""``sessionmem prune``, ``export`` and ``import``: what the database keeps, and memories moved between data dirs.

Through the running worker, the owner of the database's one writer. An export is JSON
Lines (a header, then the records; ``storage/export_records.py`` in the worker defines them);
import reads one and sends it in batches, reporting a line that is not a record by its
number.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlencode

from sessionmem.cli.client import CommandFailed, call
from sessionmem.protocol import routes
from sessionmem.protocol.client_settings import ClientConfig
from sessionmem.protocol.limits import MAX_BODY_BYTES

MB = 1024 * 1024


def size_line(report: dict[str, Any]) -> str:
    """One line about a storage report (``GET /api/storage``)."""
    on_disk = report["databaseBytes"] + report["walBytes"]
    # Per observation from the database alone: the WAL is transient (checkpoints empty it), and
    # right after a backfill it would make each observation look several times larger.
    per = report["databaseBytes"] / report["observations"] if report["observations"] else 0
    return (f"{on_disk / MB:.1f} MB on disk (WAL {report['walBytes'] / MB:.1f} MB), {report['observations']} "
            f"observations, {per / 1024:.1f} KB each in the database; raw tool data kept for {report['rawPayloads']} "
            f"({report['rawPayloadBytes'] / MB:.1f} MB)")


def cmd_prune(args: argparse.Namespace, config: ClientConfig) -> int:
    answer = call(config, "POST", routes.PRUNE, {"olderThanDays": args.older_than, "vacuum": args.vacuum})
    print(f"raw tool data of {answer['pruned']} observation(s) older than {args.older_than:g} day(s) pruned "
          f"in {answer['seconds']:.1f} s")
    print(f"  before: {size_line(answer['before'])}")
    print(f"  after:  {size_line(answer['after'])}")
    if answer["after"]["autoVacuum"] != "incremental" and not args.vacuum:
        print("  (this database frees space for reuse only; `sessionmem prune --vacuum` once gives it back)")
    return 0


def cmd_export(args: argparse.Namespace, config: ClientConfig) -> int:
    if not args.output:
        counts = _export_to(sys.stdout, args, config)
    else:
        # Into a file beside the target, renamed over it once complete: a failed export
        # (a bad --since, the worker gone) leaves an earlier export of that name as it was.
        target = Path(args.output)
        if target.is_dir():
            raise CommandFailed(f"cannot write {target}: it is a directory")
        try:
            out = tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=target.parent, delete=False,
                                              prefix=f".{target.name}.", suffix=".partial")
        except OSError as exc:
            raise CommandFailed(f"cannot write {target}: {exc.strerror or exc}") from None
        try:
            with out:
                counts = _export_to(out, args, config)
            os.replace(out.name, target)
        except BaseException:
            Path(out.name).unlink(missing_ok=True)
            raise
    summary = ", ".join(f"{counts.get(kind, 0)} {plural}" for kind, plural in (
        ("session", "sessions"), ("prompt", "prompts"), ("observation", "observations"), ("summary", "summaries")))
    print(f"exported {summary}" + (f" to {args.output}" if args.output else ""), file=sys.stderr)
    return 0


def _export_to(out: IO[str], args: argparse.Namespace, config: ClientConfig) -> dict[str, int]:
    """Write the export, page by page, to ``out``; the records written of each kind."""
    counts: dict[str, int] = {}
    after, first = 0, True
    while True:
        query = {key: value for key, value in (("project", args.project), ("since", args.since),
                                               ("after", after)) if value}
        page = call(config, "GET", f"{routes.EXPORT}?{urlencode(query)}")
        if first:
            out.write(json.dumps(page["header"], ensure_ascii=False) + "\n")
            first = False
        for record in page["records"]:
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
            counts[record["kind"]] = counts.get(record["kind"], 0) + 1
        after = page["next"]
        if not after:
            return counts


IMPORT_BATCH = 500  # records a request (the worker takes up to 2,000)
IMPORT_BATCH_BYTES = MAX_BODY_BYTES // 2  # a request's body, well under the worker's limit (a 413 halves it)
LINE_LIMIT = 16 * 1024 * 1024  # characters of a line read at most: a record is far smaller (its texts are capped)
TOTALS = ("sessions", "prompts", "observations", "summaries", "alreadyThere", "recordedHere")


def cmd_import(args: argparse.Namespace, config: ClientConfig) -> int:
    """Send an export's records to the worker in batches, each a request under its body limit.

    Error handling:
        A line that is not JSON, or not a record the worker takes, ends the import there, named by its
        number, with what came before it imported (each batch is one transaction on the worker).
    """
    path = Path(args.file)
    if not path.exists():
        print(f"sessionmem: {path} does not exist", file=sys.stderr)
        return 1
    if not path.is_file():
        print(f"sessionmem: {path} is not a file (an export is one file of JSON Lines)", file=sys.stderr)
        return 1
    totals = dict.fromkeys(TOTALS, 0)

    def send(batch: list[tuple[int, bytes]]) -> None:
        """Import ``batch`` ((line number, the record as JSON) each); one the worker finds too large, in halves."""
        body = b'{"records":[' + b",".join(record for _, record in batch) + b"]}"
        try:
            answer = call(config, "POST", routes.IMPORT, encoded=body)
        except CommandFailed as exc:
            if exc.status == 413 and len(batch) > 1:  # the worker takes less than this (max_body_bytes lowered)
                send(batch[: len(batch) // 2])
                send(batch[len(batch) // 2:])
                return
            if exc.status == 413:
                print(f"sessionmem: {path}:{batch[0][0]} is a record larger than the worker takes in one request "
                      f"({len(body):,} bytes; its max_body_bytes); it was not imported", file=sys.stderr)
            at_fault = exc.answer.get("path", "") if isinstance(exc.answer, dict) else ""  # the JSON path of a 400
            at = re.match(r"\$\.records\[(\d+)\](.*)", str(at_fault))
            if at and int(at[1]) < len(batch):
                field = f" (at {at[2].lstrip('.')})" if at[2] else ""
                print(f"sessionmem: {path}:{batch[int(at[1])][0]} is not a record this version can import"
                      f"{field}; the batch it is in was not imported", file=sys.stderr)
            print(f"sessionmem: {_imported(totals)} before it", file=sys.stderr)
            raise
        for key in TOTALS:
            totals[key] += answer.get(key, 0)  # a worker of an older version says less

    batch: list[tuple[int, bytes]] = []
    batch_bytes = 0
    header_seen = False
    try:
        with open(path, encoding="utf-8") as lines:
            for number, line in enumerate(iter(lambda: lines.readline(LINE_LIMIT + 1), ""), start=1):
                if len(line) > LINE_LIMIT:
                    print(f"sessionmem: {path}:{number} is longer than any record ({LINE_LIMIT:,} characters and "
                          f"more); nothing after it was imported, {_imported(totals)} before it", file=sys.stderr)
                    return 2
                if not line.strip():
                    continue
                try:
                    record = json.loads(line, parse_constant=_no_constant)
                    encoded = json.dumps(record, ensure_ascii=False).encode("utf-8")
                except (ValueError, RecursionError) as exc:  # a lone surrogate's UnicodeEncodeError too
                    reason = "nested too deep" if isinstance(exc, RecursionError) else exc
                    print(f"sessionmem: {path}:{number} is not JSON ({reason}); nothing after it was imported, "
                          f"{_imported(totals)} before it", file=sys.stderr)
                    return 2
                if not header_seen:
                    problem = _not_a_header(record)
                    if problem:
                        print(f"sessionmem: {path} is not a sessionmem export: {problem}", file=sys.stderr)
                        return 2
                    header_seen = True
                    continue
                if batch and (len(batch) >= IMPORT_BATCH or batch_bytes + len(encoded) > IMPORT_BATCH_BYTES):
                    send(batch)
                    batch, batch_bytes = [], 0
                batch.append((number, encoded))
                batch_bytes += len(encoded) + 1
    except UnicodeDecodeError as exc:
        print(f"sessionmem: {path} is not UTF-8 text (byte {exc.start} of a line: {exc.reason}); nothing after it "
              f"was imported, {_imported(totals)} before it", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"sessionmem: cannot read {path}: {exc.strerror or exc}; {_imported(totals)} before it", file=sys.stderr)
        return 1
    if not header_seen:
        print(f"sessionmem: {path} is empty: not a sessionmem export", file=sys.stderr)
        return 2
    if batch:
        send(batch)
    print(_imported(totals))
    return 0


def _no_constant(name: str) -> Any:
    """``json.loads``'s hook for ``NaN`` and ``Infinity``: JSON has neither, nor does the worker take them."""
    raise ValueError(f"{name} is not a JSON number")


def _not_a_header(record: Any) -> str:
    """Why the first record of a file is not the header of an export this version reads ("" if it is)."""
    if not isinstance(record, dict) or record.get("kind") != "header":
        hint = " (Claude Code transcripts are read by `sessionmem backfill`)" if isinstance(record, dict) and (
            "sessionId" in record or "message" in record) else ""
        return f"its first line is not the header `sessionmem export` writes{hint}"
    if record.get("format") != routes.EXPORT_FORMAT:
        return f"its header names the format {record.get('format')!r}"
    if type(record.get("version")) is not int or not 1 <= record["version"] <= routes.EXPORT_VERSION:
        return (f"it is of version {record.get('version')!r}; this sessionmem reads up to version "
                f"{routes.EXPORT_VERSION} (a newer sessionmem wrote it?)")
    return ""


def _imported(totals: dict[str, int]) -> str:
    return (f"imported {totals['sessions']} sessions, {totals['prompts']} prompts, {totals['observations']} "
            f"observations, {totals['summaries']} summaries; {totals['alreadyThere']} were there already"
            + (f"; {totals['recordedHere']} were of sessions recorded here, and left as they are"
               if totals["recordedHere"] else ""))


def _days(text: str) -> float:
    try:
        days = float(text)
    except ValueError:
        days = -1.0
    if not 0 <= days < float("inf"):  # NaN fails too
        raise argparse.ArgumentTypeError(f"must be a number of days, 0 or more, not {text!r}")
    return days


def add_commands(sub: Any, common: Any, client: Any) -> None:
    """Register ``prune``, ``export`` and ``import`` (``client(args)`` gives the command's ClientConfig)."""
    prune = sub.add_parser("prune", help="drop raw tool data of old observations now, and give space back")
    common(prune)
    prune.add_argument("--older-than", type=_days, default=30.0, metavar="DAYS",
                       help="observations older than this many days (default 30)")
    prune.add_argument("--vacuum", action="store_true",
                       help="rewrite the whole database compactly (the file shrinks; takes a while on a large one)")
    prune.set_defaults(fn=lambda args: cmd_prune(args, client(args)))
    export = sub.add_parser("export", help="write memories as JSON Lines (stdout, or --output)")
    common(export)
    export.add_argument("--project", help="one project (default: all)")
    export.add_argument("--since", help="what happened since: a date (2026-11-01), Unix seconds or an age (30d)")
    export.add_argument("--output", "-o", help="a file to write instead of stdout")
    export.set_defaults(fn=lambda args: cmd_export(args, client(args)))
    import_ = sub.add_parser("import", help="read memories exported by `sessionmem export` (idempotent)")
    common(import_)
    import_.add_argument("file", help="an export (JSON Lines)")
    import_.set_defaults(fn=lambda args: cmd_import(args, client(args)))
