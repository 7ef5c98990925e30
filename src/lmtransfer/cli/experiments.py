"""Commands over several experiments: `lmtransfer compare` (a sweep side by side) and `lmtransfer scaling`
(the pretraining-budget study, queued through DVC)."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

from lmtransfer.core import paths


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
        from lmtransfer.core.errors import LmtransferError
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
