"""The goals' verdicts over several runs of ``bench.gpus_goal`` together.

One run's interval on this VM is about ±0.01 wide, and its median moves about as much between
runs (the machine's spread), so a goal 1 ms from its limit reads met in one run and undecided
in the next. Every round of every run pairs each variant with its baseline within that round,
so the rounds of runs of the same code are samples of the same start, and pooling them narrows
the interval the way more rounds in one run would::

    python -m bench.pool_runs [--seed N] [--output FILE] RESULTS.json...

For each goal (``bench.gpus_goal.pooled``, as one run pools its install paths) it takes every
install path's rounds of every file that has the variant, and prints the median of the
per-round ratios against the variant's baseline (runc, or podman for the podman rows), its
bootstrap 95 % interval and the verdict.
The files must be runs of the same code on the paths the goals measure; which ones are is
the reader's claim, and the output names the files and their dates.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bench.gpus_goal import pooled


def pool(runs: list[dict[str, object]], seed: int) -> dict[str, dict[str, object]]:
    """Each goal over the rounds of every install path of every run that measured it."""
    phases: dict[str, dict[str, object]] = {}
    for i, run in enumerate(runs):
        installs = run["install_paths"]
        assert isinstance(installs, dict)
        phases |= {f"{i}:{name}": phase for name, phase in installs.items()}
    return pooled(phases, seed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pool_runs")
    parser.add_argument("results", type=Path, nargs="+", help="bench.gpus_goal results files")
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap")
    parser.add_argument("--output", type=Path, help="also write the verdicts here, as JSON")
    args = parser.parse_args(argv)
    runs = []
    for path in args.results:
        try:
            runs.append(json.loads(path.read_text()))
        except (OSError, ValueError) as err:
            print(f"bench.pool_runs: cannot read {path}: {err} (fix: name gpus_goal results)",
                  file=sys.stderr)  # fmt: skip
            return 1
        if "install_paths" not in runs[-1]:
            print(f"bench.pool_runs: {path} is not a bench.gpus_goal results file",
                  file=sys.stderr)  # fmt: skip
            return 1
    found = pool(runs, args.seed)
    for path, run in zip(args.results, runs, strict=True):
        print(f"{path}: {run.get('date', '?')}, {run.get('rounds', '?')} rounds per install")
    for name, c in found.items():
        low, high = c["ci95"]  # type: ignore[misc]
        print(
            f"{name:<26} {c['ratio']:6.3f}  [{low:.3f}, {high:.3f}]  {c['extra_ms']:+6.1f} ms  "
            f"{c['rounds']:>4} rounds  {c['verdict']} (<= {c['goal']})"
        )
    if args.output:
        files = [str(p) for p in args.results]
        args.output.write_text(json.dumps({"files": files, "goals": found}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
