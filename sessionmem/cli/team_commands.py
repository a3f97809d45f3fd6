"""``sessionmem share allow`` / ``share deny``: the user's answer for the repository of the current directory;
``sessionmem share push``: copy a project's memory of this machine into the team database; and the team
lines of ``sessionmem status``.

``share allow`` and ``share deny`` write the answer in the data dir (:mod:`sessionmem.team.consent`)
whether a worker runs or not; a running worker looks at it before each push and pull, and reads
it again when it changed.
``share allow`` is refused when an agent runs it (``CLAUDECODE`` is set in Claude Code's
shells): a repository may tell an agent to run it, and only the user shares.

For ``share push``, the running worker does the work (``POST /api/team/push``, its sync task, resumable from
where an earlier push stopped); this command starts it and shows its progress
(``GET /api/team``) as a tqdm bar, the way ``sessionmem backfill`` shows the index catching
up. Ctrl-C stops watching, not the push.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import msgspec

from sessionmem.cli.client import call
from sessionmem.protocol.client_settings import ClientConfig
from sessionmem.protocol.routes import TEAM, TEAM_PUSH

POLL_S = 0.5
AGENT_SHELL = "CLAUDECODE"  # set by Claude Code in the shells its agent runs commands in


def team_line(team: dict[str, Any]) -> str:
    """``team: connected as laptop (ann); 1,204 pushed, ...``, then what is shared and why, a line each."""
    from sessionmem.team.sharing import describe

    state = "connected" if team["connected"] else f"not connected ({team['lastError'] or 'not tried yet'})"
    lines = [f"team: {state} as {team['machine']} ({team['user']}) to {team.get('database') or 'the team database'}; "
             f"{team['pushed']:,} pushed, {team['pulled']:,} pulled since start, {team['backlog']:,} waiting to be "
             f"pushed"]
    sharing = [_entry(entry) for entry in team.get("sharing") or []]
    lines += [f"  {describe(entry)}" for entry in sharing]
    if not sharing:
        lines.append("  nothing shared: name projects in share_projects, or `sessionmem share allow` in a repository")
    if team.get("consentError"):
        lines.append(f"  !! {team['consentError']}")
    if team.get("pullRefused"):
        lines.append(f"  {team['pullRefused']:,} pulled rows refused (last: {team['lastPullRefused']})")
    for weaker in team.get("transportWarnings") or []:
        lines.append(f"  warning: database_url weakens the transport: {weaker}")
    return "\n  ".join(lines)


def _entry(entry: dict[str, Any]) -> Any:
    """A ``sharing`` entry of ``GET /api/team`` (camelCase JSON) as the record it was."""
    from sessionmem.team.sharing import ProjectSharing

    return msgspec.convert({"project_key": entry.get("projectKey", ""), **entry}, ProjectSharing)


def cmd_share_answer(args: argparse.Namespace, *, allow: bool) -> int:
    """``share allow`` / ``share deny``: the user's answer for the repository of the current directory."""
    from sessionmem.protocol.git_remote import repository_identity
    from sessionmem.protocol.project import project_of
    from sessionmem.settings import load_settings
    from sessionmem.storage.team_records import shared_key
    from sessionmem.team.consent import ConsentUnreadable, Decision, answer, consent_path, database_label
    from sessionmem.team.sharing import shares_everything

    verb = "allow" if allow else "deny"
    if allow and os.environ.get(AGENT_SHELL):
        print(f"sessionmem: `share allow` is yours to run, not an agent's: run it in your own terminal "
              f"({AGENT_SHELL} is set: this looks like a shell of Claude Code)", file=sys.stderr)
        return 1
    settings = load_settings(data_dir=args.data_dir, port=args.port)
    database = database_label(settings.database_url)
    if not database:
        print("sessionmem: team memory is off (database_url is not set): there is no team database to share with",
              file=sys.stderr)
        return 2
    where = os.getcwd()
    project = project_of(where)
    key = shared_key(repository_identity(where).project_key, project)
    try:
        answer(consent_path(settings.data_dir), database=database, project_key=key, project=project,
               decision=Decision.ALLOWED if allow else Decision.DENIED)
    except (ConsentUnreadable, OSError) as exc:
        print(f"sessionmem: cannot record `share {verb}`: {exc}", file=sys.stderr)
        return 1
    named = project if key == shared_key("", project) else f"{project} ({key})"
    by_settings = shares_everything(settings.share_projects) or project in settings.share_projects
    if allow:
        print(f"sessionmem: {named} is shared with the team database {database} from now on (approved on this "
              f"machine): its new memory is pushed there and the team's pulled here. What was remembered before "
              f"stays here (`sessionmem share push --project {project}` copies it); `sessionmem share deny` in "
              f"this repository stops sharing.")
    elif by_settings:
        print(f"sessionmem: refused on this machine, but share_projects shares {named} "
              f"({', '.join(settings.share_projects)}): it stays shared with {database} until you take it out of "
              f"share_projects.")
    else:
        print(f"sessionmem: {named} is not shared with the team database {database}: nothing more of it is pushed "
              f"or pulled (what was pushed before stays there), and its repository's request is not shown again.")
    return 0


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
    """Register ``share allow``, ``share deny`` and ``share push`` (``client(args)`` gives the command's
    ClientConfig)."""
    share = sub.add_parser("share", help="team memory: what this machine shares with the team database")
    verbs = share.add_subparsers(dest="verb", required=True)
    allow = verbs.add_parser("allow", help="share the memory of the repository of the current directory with the "
                                           "team database (approved on this machine; works without a worker)")
    common(allow)
    allow.set_defaults(fn=lambda args: cmd_share_answer(args, allow=True))
    deny = verbs.add_parser("deny", help="stop sharing the repository of the current directory, and refuse its "
                                         "request to share (nothing more of it is pushed or pulled)")
    common(deny)
    deny.set_defaults(fn=lambda args: cmd_share_answer(args, allow=False))
    push = verbs.add_parser("push", help="copy all of a project's memory of this machine into the team database "
                                         "(idempotent, resumable; the project must be shared)")
    common(push)
    push.add_argument("--project", required=True, help="the project's name, as `sessionmem search` shows it")
    push.set_defaults(fn=lambda args: cmd_share_push(args, client(args)))
