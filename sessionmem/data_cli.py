"""``sessionmem prune``: what the database keeps, on demand (the worker also prunes on its own).

Through the running worker, the owner of the database's one writer.
"""

from __future__ import annotations

import argparse
from typing import Any

from sessionmem.command_client import WorkerDown, ask, down, fail
from sessionmem.protocol import routes
from sessionmem.protocol.config import ClientConfig

MB = 1024 * 1024


def size_line(report: dict[str, Any]) -> str:
    """One line about a storage report (``GET /api/storage``)."""
    on_disk = report["databaseBytes"] + report["walBytes"]
    per = on_disk / report["observations"] if report["observations"] else 0
    return (f"{on_disk / MB:.1f} MB on disk (WAL {report['walBytes'] / MB:.1f} MB), {report['observations']} "
            f"observations, {per / 1024:.1f} KB each; raw tool data kept for {report['rawPayloads']} "
            f"({report['rawPayloadBytes'] / MB:.1f} MB)")


def cmd_prune(args: argparse.Namespace, config: ClientConfig) -> int:
    try:
        status, answer = ask(config, "POST", routes.PRUNE, {"olderThanDays": args.older_than, "vacuum": args.vacuum})
    except WorkerDown as exc:
        return down(exc)
    if status != 200:
        return fail(status, answer)
    print(f"raw tool data of {answer['pruned']} observation(s) older than {args.older_than:g} day(s) pruned "
          f"in {answer['seconds']:.1f} s")
    print(f"  before: {size_line(answer['before'])}")
    print(f"  after:  {size_line(answer['after'])}")
    if answer["after"]["autoVacuum"] != "incremental" and not args.vacuum:
        print("  (this database frees space for reuse only; `sessionmem prune --vacuum` once gives it back)")
    return 0


def add_commands(sub: Any, common: Any, client: Any) -> None:
    """Register ``prune`` (``client(args)`` gives the command's ClientConfig)."""
    prune = sub.add_parser("prune", help="drop raw tool data of old observations now, and give space back")
    common(prune)
    prune.add_argument("--older-than", type=float, default=30.0, metavar="DAYS",
                       help="observations older than this many days (default 30)")
    prune.add_argument("--vacuum", action="store_true",
                       help="rewrite the whole database compactly (the file shrinks; takes a while on a large one)")
    prune.set_defaults(fn=lambda args: cmd_prune(args, client(args)))
