"""``sessionmem share push``: copy a project's memory of this machine into the team database, and the team
line of ``sessionmem status``.

The running worker does the work (``POST /api/team/push``, its sync task, resumable from
where an earlier push stopped); this command starts it and shows its progress
(``GET /api/team``) as a tqdm bar, the way ``sessionmem backfill`` shows the index catching
up. Ctrl-C stops watching, not the push.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from sessionmem.cli.client import call
from sessionmem.protocol.client_settings import ClientConfig
from sessionmem.team.routes import TEAM, TEAM_PUSH

POLL_S = 0.5


def team_line(team: dict[str, Any]) -> str:
    """``team: connected as laptop (ann); 1,204 pushed, 310 pulled, 0 waiting to be pushed``; the pulled rows
    refused, and a warning line for each way database_url weakens the transport, if any."""
    state = "connected" if team["connected"] else f"not connected ({team['lastError'] or 'not tried yet'})"
    shared = ", ".join(team["shareProjects"]) or "projects with a .sessionmem-share file only"
    line = (f"team: {state} as {team['machine']} ({team['user']}), sharing {shared}; {team['pushed']:,} pushed, "
            f"{team['pulled']:,} pulled since start, {team['backlog']:,} waiting to be pushed")
    if team.get("pullRefused"):
        line += f"; {team['pullRefused']:,} pulled rows refused (last: {team['lastPullRefused']})"
    for weaker in team.get("transportWarnings") or []:
        line += f"\n  team: warning: database_url weakens the transport: {weaker}"
    return line


def cmd_share_push(args: argparse.Namespace, config: ClientConfig, *, out: Any = sys.stderr) -> int:
    from tqdm import tqdm

    status = call(config, "POST", TEAM_PUSH, {"project": args.project})
    bar = tqdm(total=max(status["total"], 1), unit="row", desc=f"share push {args.project}", file=out)
    try:
        while True:
            share = call(config, "GET", TEAM)["sharePush"]
            bar.total = max(share["total"], share["done"], 1)
            bar.n = share["done"]
            if share["state"] == "waiting":
                bar.set_postfix_str(f"waiting for the team database: {share['error']}"[:120], refresh=False)
            else:
                bar.set_postfix_str(f"{share['pushed']:,} pushed", refresh=False)
            bar.refresh()
            if share["state"] in ("done", "failed"):
                break
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        bar.close()
        print("sessionmem: stopped watching; the worker goes on pushing (`sessionmem status` shows how far)",
              file=out)
        return 0
    finally:
        bar.close()
    if share["state"] == "failed":
        print(f"sessionmem: the share push of {args.project} failed: {share['error']} (run it again to go on)",
              file=out)
        return 1
    print(f"sessionmem: {args.project}: {share['pushed']:,} row(s) of this machine pushed to the team database "
          f"({share['done']:,} read)")
    return 0


def add_commands(sub: Any, common: Any, client: Any) -> None:
    """Register ``share push`` (``client(args)`` gives the command's ClientConfig)."""
    share = sub.add_parser("share", help="team memory: copy a project's memory into the team database")
    verbs = share.add_subparsers(dest="verb", required=True)
    push = verbs.add_parser("push", help="copy all of a project's memory of this machine into the team database "
                                         "(idempotent, resumable; the project must be shared)")
    common(push)
    push.add_argument("--project", required=True, help="the project's name, as `sessionmem search` shows it")
    push.set_defaults(fn=lambda args: cmd_share_push(args, client(args)))
