"""Commands over several experiments: `profile` (a variant as a named DVC experiment), `compare`, `scaling` (the
pretraining-budget study), `course` (lab 2 of the ALTEGRAD course) and `imdb` (the Large Movie Review Dataset)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from lmtransfer.cli.args import command
from lmtransfer.core import paths
from lmtransfer.core.errors import LmtransferError

PROFILES = Path("profiles")  # one YAML file per variant: only the params.yaml keys it changes
BACK = f"back to the committed run: git checkout {paths.PARAMS} dvc.lock metrics && dvc checkout"


def profile_changes(path: Path) -> list[str]:
    """A profile's keys as `dvc exp run -S` overrides (the value in Hydra's grammar)."""
    from lmtransfer.core.config import read_params_file

    raw = read_params_file(path)
    if not isinstance(raw, dict) or not all(isinstance(values, dict) for values in raw.values()):
        raise LmtransferError(f"{path}: not params.yaml sections of `key: value`s")
    return [f"{section}.{key}={_override_value(value)}" for section, values in raw.items()
            for key, value in values.items()]


def _override_value(value) -> str:
    plain = isinstance(value, str) and re.fullmatch(r"[A-Za-z_][\w./-]*", value) and value.lower() not in (
        "true", "false", "null", "nan", "inf")
    return value if plain else json.dumps(value)


def overlay(params_file: Path, changes: list[str]) -> dict:
    """`params_file` with `changes` applied as `dvc exp run -S` applies them (DVC's own code, on a copy)."""
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
    """params.yaml with `changes`, validated: a key it lacks or a bad value stops here, before any work."""
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
    return parse_classification_params(overlay(root / paths.PARAMS, changes),
                                       f"{paths.PARAMS} with " + " ".join(changes))


def profile_command(name: str, changes: list[str], queue: bool = False) -> list[str]:
    return ["dvc", "exp", "run", *(["--queue"] if queue else []), "-n", name,
            *[part for change in changes for part in ("-S", change)]]


def require_committed_params(root: Path, changes: list[str]) -> None:
    """A profile applies over the committed params.yaml (or this same run's values): edits would mix in."""
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
    run = profile_command(args.name, changes, args.queue)
    print("profile: " + shlex.join(run), flush=True)
    if subprocess.run(run, cwd=args.root, env=dvc_env()).returncode:
        raise LmtransferError(f"`{shlex.join(run[:5])} ...` failed (its error is above)")
    if args.queue:
        print(f"profile: {args.name} queued; run the queue with `dvc exp run --run-all`, then `lmtransfer compare`")
    else:
        print(f"profile: experiment {args.name} is in the workspace (`lmtransfer results`, plots/) and saved "
              f"(`dvc exp show`); {BACK}")


def cmd_compare(args: argparse.Namespace) -> None:
    from lmtransfer.reporting.experiments import compare_rows, format_table, list_experiments, plot_by

    experiments = list_experiments(args.root, args.prefix, args.rev)
    rows, shown = compare_rows(experiments, args.by)
    print(format_table(rows, shown))
    if len(rows) < 2:
        print(f"\n{'no experiment' + (f' named {args.prefix}*' if args.prefix else '')} of this commit beside the "
              "workspace yet: make one with `dvc exp run -S finetune.lr=0.001` (any params.yaml key), then compare "
              "again")
    if args.by:
        figure = plot_by(rows, args.by, args.root / paths.PLOTS / f"compare-{args.by}.png")
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
        print(f"scaling: one pretraining run moves the gap by {summary['pretraining_spread']['sd']:.4f} (sd); the "
              f"gap's slope per 10x tokens, that spread counted: 95% CI {low:+.4f} to {high:+.4f} -> {path}")
        return
    base = load_classification_params(args.root / paths.PARAMS).pretrain
    start = time.perf_counter()
    if not args.summary_only:
        scaling.run_budgets(args.budgets, base, args.root, args.jobs)
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


def cmd_course(args: argparse.Namespace) -> None:
    from lmtransfer.course import experiment as course
    from lmtransfer.course.experiment import lab_lines, write_french_corpus
    from lmtransfer.course.files import DEFAULT_URL, Manifest, gather, read_manifest
    from lmtransfer.reporting.experiments import dvc_env
    from lmtransfer.reporting.result_files import read_result_json, reading

    root = args.root
    profile = profile_changes(root / PROFILES / "course.yaml")
    overlaid_params(root, profile + args.changes)  # a bad --set stops before any download
    manifest = read_manifest(args.manifest) if args.manifest else Manifest()
    raw = root / course.RAW
    present = gather(raw, manifest, args.source, args.url or DEFAULT_URL)
    print(f"course: {len(present)} files of {manifest.repository} at {manifest.commit[:7]} checked in {raw}")
    plan = course.plan_for(present, args.changes)
    if plan.write_bible:
        write_french_corpus(raw)
    if args.fetch_only:
        return
    params = overlaid_params(root, profile + plan.changes)  # a bad one stops here, before any work
    require_committed_params(root, profile + plan.changes)
    with (raw / "cls-books" / "train.review.spm").open(encoding="utf-8") as lines:
        train_tokens = sum(len(line.split()) + 1 for line in lines)
    print(f"course: the pretrained variant: {plan.pretrained}; about "
          f"{course.estimate_minutes(params, train_tokens):.0f} min on 2 CPU cores (a GPU: minutes); each stage "
          "shows its progress")
    seconds = course.run_pipeline(profile_command("course", profile + plan.changes), root, dvc_env())
    path = root / "metrics" / "evaluate.json"
    report = read_result_json(path, "the course's evaluation metrics")
    with reading(path, "the course's evaluation metrics"):
        print("\n" + "\n".join(lab_lines(report)))
    print(f"\ncourse: {seconds / 60:.1f} min; the workspace holds the experiment `course` (plots/, `lmtransfer "
          f"results`); {BACK}")


def cmd_imdb(args: argparse.Namespace) -> None:
    from lmtransfer.classification.data.imdb_release import ACL_IMDB_V1, imdb_reviews

    release = dataclasses.replace(ACL_IMDB_V1, url=args.url) if args.url else ACL_IMDB_V1
    kept = imdb_reviews(args.source or "", release)
    counts = ", ".join(f"{pin.folder} {pin.files:,}" for pin in release.folders)
    print(f"imdb: {sum(pin.files for pin in release.folders):,} reviews of {release.archive_name} checked and kept "
          f"in {kept} ({counts})")
    print("imdb: use them with `data.source: imdb` (25,000 train / 25,000 test as published) or "
          "`data.corpus: [imdb-reviews]` (the 75,000 train and unlabeled reviews as any source's corpus)")


def add_commands(commands: argparse._SubParsersAction) -> None:
    from lmtransfer.reporting.scaling import BUDGETS

    root = {"type": Path, "default": Path("."), "help": "the repository root"}
    changes = {"dest": "changes", "action": "append", "default": [], "metavar": "KEY=VALUE"}
    profile = command(commands, "profile", "a variant of the pipeline (profiles/NAME.yaml) run as the named DVC "
                      "experiment NAME", "Runs `dvc exp run -n NAME -S key=value ...` with each key of "
                      "profiles/NAME.yaml, over the committed params.yaml; the overlaid params are checked first.")
    profile.add_argument("name", help="a profile: the name of a file in profiles/ without .yaml")
    profile.add_argument("--set", **changes, help="one more change, as `dvc exp run -S` (repeatable; it wins)")
    profile.add_argument("--queue", action="store_true", help="queue it (DVC runs it in a folder of its own: files "
                         "it reads must be committed or outside the repository)")
    profile.add_argument("--root", **root)
    profile.set_defaults(func=cmd_profile)

    compare = command(commands, "compare", "the experiments side by side: accuracies, the gap with its interval, "
                      "the baseline", "One row per experiment of the current commit (`dvc exp show --json`): the "
                      "params that differ, both variants' test accuracy, the gap with its 95% interval and p, the "
                      "epoch-1 head start and the TF-IDF baseline.")
    compare.add_argument("--by", metavar="PARAM", help="order the rows by this params.yaml key (e.g. finetune.lr) "
                         "and draw accuracies and gap against it in plots/compare-PARAM.png")
    compare.add_argument("--prefix", default="", help="only experiments whose name starts with this")
    compare.add_argument("--rev", help="the experiments of this commit (default: the current one, HEAD)")
    compare.add_argument("--root", **root)
    compare.set_defaults(func=cmd_compare)

    scaling = command(commands, "scaling", "the pretraining scaling study: the pipeline at several budgets through "
                      "DVC's queue", "Queue one DVC experiment per pretraining budget (pretrain.max_steps and "
                      "adapt_epochs scaled alike), run the queue, write results/scaling/summary.json and scaling.png.")
    scaling.add_argument("--budgets", type=float, nargs="+", default=list(BUDGETS),
                         help="multiples of today's pretraining")
    scaling.add_argument("--jobs", type=int, default=1, help="experiments run at once by the queue")
    scaling.add_argument("--summary-only", action="store_true",
                         help="queue and run nothing: summarize the scaling experiments that exist")
    scaling.add_argument("--rev", help="with --summary-only: the experiments of this commit (default: HEAD)")
    scaling.add_argument("--pretraining-spread", type=Path, metavar="EVALUATE_JSON",
                         help="only add to the summary how far one pretraining run moves the gap, from a run with "
                              "several (its metrics/evaluate.json)")
    scaling.add_argument("--root", **root)
    scaling.set_defaults(func=cmd_scaling)
    add_data_commands(commands, root, changes)


def add_data_commands(commands: argparse._SubParsersAction, root: dict, changes: dict) -> None:
    """`imdb` and `course`: the data the profiles read, fetched and checked once."""
    imdb = command(commands, "imdb", "get the Large Movie Review Dataset (100,000 IMDB reviews) once: fetched, "
                   "checked, kept", "Downloads aclImdb_v1.tar.gz into the dataset cache (or takes a local copy), "
                   "checks it against the pinned release and keeps its reviews as text, as the pipeline does on its "
                   "first run with data.source: imdb.")
    imdb.add_argument("--from", dest="source", metavar="PATH",
                      help="a local aclImdb_v1.tar.gz, or its unpacked aclImdb/ folder (as data.imdb_from)")
    imdb.add_argument("--url", help="download from this address instead (a mirror; checked all the same)")
    imdb.set_defaults(func=cmd_imdb)

    course = command(commands, "course", "lab 2 of the ALTEGRAD course on its own files: fetched and checked, "
                     "pretrained against scratch", "Gets the course's files at a pinned commit (or --from a folder), "
                     "checks each, runs the pipeline as the DVC experiment `course` (profiles/course.yaml) and "
                     "prints the lab's comparison.")
    course.add_argument("--from", dest="source", type=Path, metavar="FOLDER",
                        help="take the files from this folder or clone instead of downloading them (offline)")
    course.add_argument("--url", help="download from this address instead (the files under their repository "
                        "paths; default: the repository's raw files at the pinned commit)")
    course.add_argument("--manifest", type=Path, help="check against this JSON instead of the pinned commit's "
                        "files: {\"repository\", \"commit\", \"files\": [{\"path\", \"git_blob\" and/or "
                        "\"sha256\", \"size\", \"required\"}]}")
    course.add_argument("--set", **changes, help="one more change, as `dvc exp run -S` (repeatable), e.g. --set "
                        "'finetune.seeds=[3,4,5]'")
    course.add_argument("--fetch-only", action="store_true", help="get and check the files, run nothing")
    course.add_argument("--root", **root)
    course.set_defaults(func=cmd_course)
