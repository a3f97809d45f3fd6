"""Run sessionmem's benchmarks: ``.venv/bin/python bench/run.py [SCENARIO ...] [options]``.

Scenarios (default: all): replay_http, replay_hooks, throughput, openloop, context.
See bench/README.md for what each measures and the targets.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import scenarios  # noqa: E402
from report import write_report  # noqa: E402

from sessionmem.replay.convert import ConversionStats, convert, transcript_files  # noqa: E402

ALL = ("replay_http", "replay_hooks", "throughput", "openloop", "context")
DEFAULT_CORPUS = Path(__file__).resolve().parent.parent.parent / "shared" / "corpus" / "transcripts"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenarios", nargs="*", default=[], metavar="SCENARIO",
                        help=f"any of {', '.join(ALL)} (default: all)")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="transcripts to replay")
    parser.add_argument("--via", choices=("http", "hooks"), help="replay through the API or real hook processes "
                        "(default: both, as replay_http and replay_hooks)")
    parser.add_argument("--sessions", type=int, default=8, help="sessions replayed concurrently")
    parser.add_argument("--rate", type=float, help="replay: open-loop offered load in events/s")
    parser.add_argument("--speed", default="max", help="replay: original timing scaled by X, or 'max'")
    parser.add_argument("--limit", type=int, help="replay only the first N sessions")
    parser.add_argument("--hook-sessions", type=int, default=12, help="sessions replayed via hooks (it is slower)")
    parser.add_argument("--llm", choices=("offline", "scripted"), default="offline",
                        help="offline compressor, or the anthropic one against a local scripted Messages API")
    parser.add_argument("--llm-delay", type=float, default=0.2, help="scripted Messages API reply delay, seconds")
    parser.add_argument("--openloop-rate", type=float, default=500.0)
    parser.add_argument("--openloop-sessions", type=int, default=64)
    parser.add_argument("--openloop-seconds", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=3, help="throughput: alternating rounds per endpoint")
    parser.add_argument("--round-seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=32, help="throughput: connections")
    parser.add_argument("--context-observations", type=int, default=10_000)
    parser.add_argument("--context-requests", type=int, default=300)
    parser.add_argument("--baseline-runs", type=int, default=30, help="bare interpreter starts timed for proportion")
    parser.add_argument("--out", type=Path, help="report folder (default bench/results/<timestamp>)")
    parser.add_argument("--smoke", action="store_true",
                        help="a few seconds of everything, vectors off unless --worker-env says otherwise (CI)")
    parser.add_argument("--worker-env", action="append", default=[], metavar="NAME=VALUE",
                        help="a setting for every worker the bench starts (e.g. SESSIONMEM_EMBEDDER=none); repeatable")
    args = parser.parse_args(argv)
    malformed = [item for item in args.worker_env if "=" not in item]
    if malformed:
        parser.error(f"--worker-env takes NAME=VALUE, not {', '.join(malformed)}")
    args.worker_env = dict(item.split("=", 1) for item in args.worker_env)
    unknown = [s for s in args.scenarios if s not in ALL]
    if unknown:
        parser.error(f"unknown scenario(s) {', '.join(unknown)}; choose from {', '.join(ALL)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    chosen = args.scenarios or list(ALL)
    if args.via:
        chosen = [s for s in chosen if not s.startswith("replay_") or s == f"replay_{args.via}"]
    if args.smoke:
        args.limit = args.limit or 6
        args.hook_sessions = min(args.hook_sessions, 2)
        args.openloop_rate, args.openloop_seconds, args.openloop_sessions = 100.0, 1.0, 8
        args.rounds, args.round_seconds = 1, 0.5
        args.context_observations, args.context_requests = 300, 50
        args.baseline_runs = 5
        # No vectors unless asked: each worker would embed what it stored in the background, CPU the
        # smoke's figures do not need (the embedder has benches of its own: search_latency, catch_up).
        args.worker_env.setdefault("SESSIONMEM_EMBEDDER", "none")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = args.out or Path(__file__).resolve().parent / "results" / stamp
    out.mkdir(parents=True, exist_ok=True)

    stats = ConversionStats()
    sessions = convert(transcript_files(args.corpus), stats)
    sessions.sort(key=lambda s: s.session_id)
    if args.limit:
        sessions = sessions[: args.limit]
    speed = None if args.speed == "max" else float(args.speed)
    ctx = scenarios.Context(out=out, sessions=sessions, llm=args.llm, llm_delay=args.llm_delay,
                            worker_env=args.worker_env)

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).parent).stdout.strip() or "unknown"
    meta = {"started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "command": shlex.join([sys.executable, *sys.argv]),
            "commit": commit, "cores": os.cpu_count(), "corpus": str(args.corpus), "conversion": stats.as_dict(),
            "replayed_sessions": len(sessions), "llm": args.llm, "worker_env": args.worker_env}
    results: dict[str, object] = {}
    print(f"bench: {len(sessions)} sessions, {stats.tool_uses} tool uses in the corpus "
          f"({stats.broken_lines} unparseable lines); writing to {out}", file=sys.stderr)
    if "replay_hooks" in chosen:
        results["python_baseline"] = scenarios.scenario_python_baseline(args.baseline_runs)
    for name in chosen:
        print(f"bench: {name}", file=sys.stderr)
        if name == "replay_http":
            results[name] = scenarios.scenario_replay(ctx, via="http", concurrency=args.sessions, speed=speed,
                                                      rate=args.rate, name=name)
        elif name == "replay_hooks":
            hook_ctx = scenarios.Context(out=out, sessions=sessions[: args.hook_sessions], llm=args.llm,
                                         llm_delay=args.llm_delay, plots=ctx.plots, disk=ctx.disk,
                                         worker_env=args.worker_env)
            results[name] = scenarios.scenario_replay(hook_ctx, via="hooks", concurrency=min(args.sessions, 4),
                                                      speed=None, rate=None, name=name)
        elif name == "throughput":
            results[name] = scenarios.scenario_throughput(ctx, rounds=args.rounds, seconds=args.round_seconds,
                                                          concurrency=args.concurrency)
        elif name == "openloop":
            results[name] = scenarios.scenario_openloop(ctx, rate=args.openloop_rate,
                                                        sessions=args.openloop_sessions,
                                                        seconds=args.openloop_seconds)
        elif name == "context":
            results[name] = scenarios.scenario_context(ctx, observations=args.context_observations,
                                                       requests=args.context_requests)
        if name in ctx.disk and isinstance(results.get(name), dict):
            results[name]["data_dir_bytes"] = ctx.disk[name]
    summary = write_report(out, meta, results, ctx.plots)
    print(summary.read_text())
    lost = sum(r.get("lost", 0) + r.get("duplicates", 0) for r in results.values() if isinstance(r, dict))
    return 1 if lost else 0


if __name__ == "__main__":
    raise SystemExit(main())
