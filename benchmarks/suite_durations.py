"""Where the test suite's time goes: `make test`'s wall time per pytest command and its slowest tests.

Reads the output of `make test` (or of `.ci/run`, which runs it) as saved to a file, so the one run that checks the
suite also measures it; pytest prints the slowest 15 of each command (`--durations=15` in pyproject.toml).

    bash .ci/run 2>&1 | tee ci.log        # on a fresh clone, alone on the machine
    python benchmarks/suite_durations.py --from-log ci.log --notes "fresh clone, alone"
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from results_file import Column, write_result

SUMMARY = re.compile(r"^=+ (?P<counts>.*?) in (?P<seconds>[\d.]+)s(?: \(.*\))? =+$")
DURATION = re.compile(r"^(?P<seconds>[\d.]+)s (?P<phase>setup|call|teardown)\s+(?P<test>\S+)$")


def parse(log: str) -> tuple[list[list], list[list]]:
    """The pytest commands (counts, seconds) in order, and every reported duration (seconds, phase, test, command)."""
    commands, durations, command = [], [], 1
    for line in log.splitlines():
        line = line.strip()
        if match := DURATION.match(line):
            durations.append([float(match["seconds"]), match["phase"], match["test"], command])
        elif match := SUMMARY.match(line):
            commands.append([command, match["counts"], float(match["seconds"])])
            command += 1
    return commands, durations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from-log", type=Path, required=True, help="the saved output of make test (or .ci/run)")
    parser.add_argument("--notes", default="", help="how the run was made (fresh clone, alone, ...)")
    parser.add_argument("--top", type=int, default=15, help="rows of slowest tests kept")
    parser.add_argument("--code", help="the commit the log's run tested (default: this checkout's)")
    parser.add_argument("--name", default="suite_durations",
                        help="the result file's name (suite_durations-fast for a saved `make test-fast` output)")
    parser.add_argument("--command", default="bash .ci/run | tee LOG; python benchmarks/suite_durations.py --from-log LOG",
                        help="how the log was made, as the result file states it")
    args = parser.parse_args()
    commands, durations = parse(args.from_log.read_text(encoding="utf-8", errors="replace"))
    if not commands:
        raise SystemExit(f"{args.from_log}: no pytest summary line ('=== N passed in S s ===') in it")
    total = sum(row[2] for row in commands)
    slowest = sorted(durations, key=lambda row: -row[0])[: args.top]
    rows = [[f"pytest command {n}", counts, seconds] for n, counts, seconds in commands]
    rows += [[f"{test} ({phase})", f"command {n}", seconds] for seconds, phase, test, n in slowest]
    write_result(args.name, [Column("what"), Column("tests"), Column("seconds", ",.0f")], rows,
                 seconds=total, notes=args.notes,
                 command=args.command, code=args.code)


if __name__ == "__main__":
    main()
