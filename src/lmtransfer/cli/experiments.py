"""Commands over several experiments: `lmtransfer profile` (a variant of the pipeline as a named DVC experiment),
`lmtransfer compare` (a sweep side by side) and `lmtransfer scaling` (the pretraining-budget study, queued)."""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from lmtransfer.core import paths
from lmtransfer.core.errors import LmtransferError

PROFILES = Path("profiles")  # one YAML file per variant: only the params.yaml keys it changes


def profile_changes(path: Path) -> list[str]:
    """A profile's keys as `dvc exp run -S` overrides (`section.key=value`, the value in Hydra's grammar)."""
    from lmtransfer.core.config import read_params_file

    raw = read_params_file(path)
    if not isinstance(raw, dict) or not all(isinstance(values, dict) for values in raw.values()):
        raise LmtransferError(f"{path}: not params.yaml sections of `key: value`s")
    return [f"{section}.{key}={_override_value(value)}" for section, values in raw.items() for key, value in values.items()]


def _override_value(value) -> str:
    plain = isinstance(value, str) and re.fullmatch(r"[A-Za-z_][\w./-]*", value) and value.lower() not in (
        "true", "false", "null", "nan", "inf")
    return value if plain else json.dumps(value)


def overlay(params_file: Path, changes: list[str]) -> dict:
    """`params_file` with `changes` applied the way `dvc exp run -S` applies them (DVC's own code, on a copy)."""
    from dvc.exceptions import DvcException
    from dvc.utils.hydra import apply_overrides

    from lmtransfer.core.config import read_params_file

    with tempfile.TemporaryDirectory() as folder:
        copy = Path(folder) / "params.yaml"
        shutil.copyfile(params_file, copy)
        try:
            apply_overrides(copy, changes)
        except DvcException as exc:
            raise LmtransferError(f"{paths.PARAMS} with {' '.join(changes)}: {exc}") from None
        return read_params_file(copy)


def overlaid_params(root: Path, changes: list[str]):
    """params.yaml with `changes`, validated: a profile or `--set` naming a key params.yaml lacks, or a bad value,
    stops here, naming it, before any work."""
    from lmtransfer.classification.config import parse_classification_params
    from lmtransfer.core.config import read_params_file

    raw = read_params_file(root / paths.PARAMS)
    for change in changes:
        name, equals, _ = change.partition("=")
        section, _, key = name.partition(".")
        if not equals or not key:
            raise LmtransferError(f"{change}: not `section.key=value`")
        if not isinstance(raw.get(section), dict) or key not in raw[section]:
            raise LmtransferError(f"{change}: {name} is not a key of {paths.PARAMS}")
    return parse_classification_params(overlay(root / paths.PARAMS, changes), f"{paths.PARAMS} with " + " ".join(changes))


def profile_command(name: str, changes: list[str], queue: bool = False) -> list[str]:
    """`dvc exp run` of the one pipeline as experiment `name`, with the profile's and the user's changes."""
    return ["dvc", "exp", "run", *(["--queue"] if queue else []), "-n", name,
            *[part for change in changes for part in ("-S", change)]]


def require_committed_params(root: Path, changes: list[str]) -> None:
    """A profile applies over the committed params.yaml (or over this same run's values: the command run again);
    edits there, or another experiment's values left in the workspace, would mix in."""
    from lmtransfer.core.config import read_params_file

    current = read_params_file(root / paths.PARAMS)
    with tempfile.TemporaryDirectory() as folder:
        committed = Path(folder) / "params.yaml"
        committed.write_text(subprocess.run(["git", "show", f"HEAD:{paths.PARAMS}"], cwd=root, capture_output=True,
                                            text=True).stdout, encoding="utf-8")
        if current in (read_params_file(committed), overlay(committed, changes)):
            return
    raise LmtransferError(f"{paths.PARAMS} differs from the commit's (your edits, or another experiment run in the "
                          f"workspace): a profile applies over the committed one; `git stash` or `git checkout "
                          f"{paths.PARAMS}` first (an experiment stays saved: `dvc exp apply NAME`)")


def cmd_profile(args: argparse.Namespace) -> None:
    from lmtransfer.reporting.experiments import dvc_env

    changes = profile_changes(args.root / PROFILES / f"{args.name}.yaml") + args.changes
    overlaid_params(args.root, changes)  # a bad key stops before DVC touches params.yaml
    require_committed_params(args.root, changes)
    command = profile_command(args.name, changes, args.queue)
    print("profile: " + shlex.join(command), flush=True)
    if subprocess.run(command, cwd=args.root, env=dvc_env()).returncode:
        raise LmtransferError(f"`{shlex.join(command[:5])} ...` failed (its error is above)")
    if args.queue:
        print(f"profile: {args.name} queued; run the queue with `dvc exp run --run-all`, then `lmtransfer compare`")
    else:
        print(f"profile: experiment {args.name} is in the workspace (`lmtransfer results`, plots/) and saved "
              f"(`dvc exp show`); back to the committed run: git checkout {paths.PARAMS} dvc.lock metrics && dvc checkout")


def cmd_compare(args: argparse.Namespace) -> None:
    from lmtransfer.reporting.compare import compare_rows, format_table, plot_by
    from lmtransfer.reporting.experiments import list_experiments

    experiments = list_experiments(args.root, args.prefix, args.rev)
    rows, shown = compare_rows(experiments, args.by)
    print(format_table(rows, shown))
    if len(rows) < 2:
        print(f"\n{'no experiment' + (f' named {args.prefix}*' if args.prefix else '')} of this commit beside the "
              "workspace yet: make one with `dvc exp run -S finetune.lr=0.001` (any params.yaml key), then compare "
              "again")
    if args.by:
        figure = plot_by(rows, args.by, args.root / (args.plot or paths.PLOTS / f"compare-{args.by}.png"))
        print(f"\nfigure: {figure}")


def cmd_scaling(args: argparse.Namespace) -> None:
    from lmtransfer.classification.config import load_classification_params
    from lmtransfer.reporting import scaling

    if args.pretraining_spread:
        from lmtransfer.core.io import read_json, require_file, write_json

        if not args.pretraining_spread.is_file():  # the user named it: say so, not which stage makes such files
            raise LmtransferError(f"--pretraining-spread {args.pretraining_spread}: no such file; give the "
                                  "evaluate.json of a run with 2 or more pretraining runs (metrics/evaluate.json "
                                  "after `make run`)")
        path = args.root / scaling.RESULTS / "summary.json"
        summary = scaling.add_pretraining_spread(read_json(require_file(path, "scaling summary")),
                                                 read_json(args.pretraining_spread))
        write_json(path, summary)
        low, high = summary["gap_fit"]["slope_ci95_with_pretraining_spread"]
        print(f"scaling: one pretraining run moves the gap by {summary['pretraining_spread']['sd']:.4f} (sd); the gap's "
              f"slope per 10x tokens, that spread counted: 95% CI {low:+.4f} to {high:+.4f} -> {path}")
        return
    base = load_classification_params(args.root / paths.PARAMS).pretrain
    start = time.perf_counter()
    if not args.summary_only:
        scaling.queue_budgets(args.budgets, base, args.root)
        scaling.run_queue(args.root, args.jobs)
        print(f"scaling: the queue ran in {time.perf_counter() - start:,.0f} s")
    summary = scaling.write_study(args.root, base, rev=args.rev)
    reach = summary["baseline_reached"]
    print(f"scaling: {len(summary['budgets'])} budgets -> {scaling.RESULTS}/summary.json, scaling.png")
    print(f"scaling: gap {summary['gap_fit']['slope_per_decade']:+.4f} per 10x pretraining tokens "
          f"(95% CI {summary['gap_fit']['slope_ci95'][0]:+.4f} to {summary['gap_fit']['slope_ci95'][1]:+.4f}); "
          f"the pretrained line reaches the baseline {reach['target_accuracy']:.4f} at "
          f"{_tokens(reach['tokens'])} tokens")


def _tokens(value: float | None) -> str:
    return "no finite number of" if value is None else f"{value:.3g}"


def add_commands(command: Callable[..., argparse.ArgumentParser]) -> None:
    profile = command(
        "profile", "a variant of the pipeline (profiles/NAME.yaml) run as the named DVC experiment NAME",
        "Runs `dvc exp run -n NAME -S key=value ...` with each key of profiles/NAME.yaml (only what it changes "
        "from params.yaml: course, reviews, imdb, large), in the workspace, over the committed params.yaml. The "
        "overlaid params are checked first: a key params.yaml lacks or a bad value stops it, naming the key.",
    )
    profile.add_argument("name", help="a profile: the name of a file in profiles/ without .yaml")
    profile.add_argument("--set", dest="changes", action="append", default=[], metavar="KEY=VALUE",
                         help="one more change for this run, as `dvc exp run -S` (repeatable; it wins)")
    profile.add_argument("--queue", action="store_true", help="queue it (DVC runs it in a folder of its own: files "
                         "it reads must be committed or outside the repository, as the IMDb reviews' cache)")
    profile.add_argument("--root", type=Path, default=Path("."), help="the repository root")
    profile.set_defaults(func=cmd_profile)

    compare = command(
        "compare", "the experiments side by side: accuracies, the gap with its interval, the baseline",
        "One row per experiment of the current commit (`dvc exp run`s and the workspace, read through "
        "`dvc exp show --json` and each one's metrics/evaluate.json): the params that differ between them, "
        "pretrained and scratch test accuracy (mean ± std over seeds), the gap with its 95% interval and "
        "p-value, the epoch-1 head start and the TF-IDF baseline.",
    )
    compare.add_argument("--by", metavar="PARAM", help="order the rows by this params.yaml key (e.g. finetune.lr) "
                         "and draw accuracies and gap against it")
    compare.add_argument("--plot", type=Path, help="where --by writes its figure (default: plots/compare-PARAM.png)")
    compare.add_argument("--prefix", default="", help="only experiments whose name starts with this")
    compare.add_argument("--rev", help="the experiments of this commit (default: the current one, HEAD)")
    compare.add_argument("--root", type=Path, default=Path("."), help="the repository root")
    compare.set_defaults(func=cmd_compare)

    from lmtransfer.reporting.scaling import BUDGETS

    scaling = command(
        "scaling", "the pretraining scaling study: the pipeline at several budgets through DVC's queue",
        "Queue one DVC experiment per pretraining budget (a multiple of params.yaml's pretrain.max_steps and "
        "pretrain.adapt_epochs, scaled alike), run the queue, then write results/scaling/summary.json and "
        "scaling.png. Budgets already run are kept. The 8x budget alone takes about 30 minutes on 2 CPU cores.",
    )
    scaling.add_argument("--budgets", type=float, nargs="+", default=list(BUDGETS),
                         help="multiples of today's pretraining")
    scaling.add_argument("--jobs", type=int, default=1, help="experiments run at once by the queue")
    scaling.add_argument("--summary-only", action="store_true",
                         help="queue and run nothing: summarize the scaling experiments that exist")
    scaling.add_argument("--rev", help="with --summary-only: the experiments of this commit (default: HEAD)")
    scaling.add_argument("--pretraining-spread", type=Path, metavar="EVALUATE_JSON",
                         help="only add to results/scaling/summary.json how far one pretraining run moves the gap, "
                              "from a run with several (its metrics/evaluate.json), and the gap slope's interval "
                              "that counts it")
    scaling.add_argument("--root", type=Path, default=Path("."), help="the repository root")
    scaling.set_defaults(func=cmd_scaling)
