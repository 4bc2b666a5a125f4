"""Benchmark: CPU instructions a workflow costs in its own process, counted, not timed.

    python -m bench.instructions                          # w1's and w3's shapes, this tree
    python -m bench.instructions --tree /tmp/base         # another checkout's durable/ (a worktree)
    python -m bench.instructions --shapes signal:3 --small 30 --large 300

On a shared or virtual machine the wall time of a step moves by tens of
percent from one minute to the next, while the instructions its process
executes do not. Each shape (``MODE:STEPS``: ``signal`` is workload 1's
inline transport with a completion signal, ``caller`` workload 3's caller's
thread, ``eager`` dispatched steps run in the turn as a Celery worker runs them,
workload 4's turn without the broker, ``wake`` a sleeper started, suspended and
woken by the due-run sweep in pages as workload 8's workers wake them; its
STEPS is ignored: use ``wake:1``) runs ``bench.ours inproc`` under valgrind's callgrind twice, with
``--small`` and ``--large`` steps' worth of workflows; the difference divided
by the difference in workflows is the cost of one workflow with the
process's start, imports and first statements taken out. Counted: user-space instructions of the
Python process (every thread), not the database server's and not the
kernel's (system calls, the network). A figure that is the same at two
revisions is the same cost; it says nothing of time spent waiting for the
database. Needs valgrind (Debian package ``valgrind``); writes
``bench/results/instructions-<timestamp>.json``. Its own database,
``bench_instructions``, is dropped and made again at every run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
DB = os.environ.get("BENCH_INSTRUCTIONS_DB", "postgres://postgres@127.0.0.1:5432/bench_instructions")
_COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")


def _recreate_database(env: dict[str, str]) -> None:
    import psycopg

    base, name = DB.rsplit("/", 1)
    with psycopg.connect(f"{base.replace('postgres://', 'postgresql://')}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    subprocess.run([sys.executable, "-m", "django", "migrate", "-v", "0"], env=env, check=True)


def _count(env: dict[str, str], mode: str, steps: int, workflows: int) -> int:
    """Instructions of one ``bench.ours inproc`` process running ``workflows`` workflows."""
    argv = ["--mode", mode, "--steps", str(steps), "--workflows", str(workflows), "--reps", "1", "--warmup", "0"]
    with tempfile.TemporaryDirectory() as tmp:
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/out"]
        cmd += [sys.executable, "-m", "bench.ours", "inproc", *argv]
        # In the measured tree: ``python -m`` puts the working directory first on the path.
        done = subprocess.run(cmd, env=env, cwd=env["BENCH_TREE"], capture_output=True, text=True)
    found = _COLLECTED.search(done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"callgrind run failed ({' '.join(cmd)}):\n{done.stderr[-2000:]}")
    return int(found.group(1))


def _revision(tree: Path) -> str:
    got = subprocess.run(["git", "-C", str(tree), "describe", "--always", "--dirty"], capture_output=True, text=True)
    return got.stdout.strip() or "unknown"


def measure(tree: Path, shapes: list[tuple[str, int]], small_steps: int, large_steps: int) -> dict[str, Any]:
    env = dict(os.environ, DATABASE_URL=DB, DJANGO_SETTINGS_MODULE="bench.settings")
    env["PYTHONPATH"] = os.pathsep.join([str(tree), str(REPO)])
    env["BENCH_TREE"] = str(tree)
    _recreate_database(env)
    rows = []
    for mode, steps in shapes:
        env["BENCH_TRANSPORT"] = "inline" if mode == "signal" else "manual"
        small, large = max(1, small_steps // steps), max(2, large_steps // steps)
        low, high = _count(env, mode, steps, small), _count(env, mode, steps, large)
        per_workflow = (high - low) / (large - small)
        rows.append(
            {
                "mode": mode,
                "steps": steps,
                "workflows": [small, large],
                "instructions": [low, high],
                "per_workflow": round(per_workflow),
                "per_step": round(per_workflow / steps),
            }
        )
        print(f"{mode:7s} {steps:4d} steps: {per_workflow / 1e6:8.3f} M instructions per workflow", flush=True)
    valgrind = subprocess.run(["valgrind", "--version"], capture_output=True, text=True).stdout.strip()
    return {
        "benchmark": "instructions",
        "tree": str(tree),
        "revision": _revision(tree),
        "python": sys.version.split()[0],
        "valgrind": valgrind,
        "counted": "user-space instructions of the Python process, every thread (not the server, not the kernel)",
        "shapes": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", type=Path, default=REPO, help="the checkout whose durable/ is measured")
    parser.add_argument("--shapes", default="signal:3,caller:100", help="MODE:STEPS,... (signal, caller, eager, wake)")
    parser.add_argument("--small", type=int, default=60, help="steps' worth of workflows in the first process")
    parser.add_argument("--large", type=int, default=1200, help="steps' worth of workflows in the second process")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    if args.large <= args.small:
        raise SystemExit("--large must be more steps than --small")
    shapes = []
    for part in args.shapes.split(","):
        mode, _, steps = part.partition(":")
        if mode not in ("signal", "caller", "eager", "wake") or not steps.isdigit() or int(steps) < 1:
            raise SystemExit(f"a shape is MODE:STEPS with MODE signal, caller, eager or wake, got {part!r}")
        shapes.append((mode, int(steps)))
    result = measure(args.tree.resolve(), shapes, args.small, args.large)
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = RESULTS / f"instructions-{result['revision']}-{stamp}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"results: {out}")


if __name__ == "__main__":
    main()
