"""`lmtransfer course`: lab 2 of the ALTEGRAD course from one command, on its own files (docs/guide/course.md)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path


def cmd_course(args: argparse.Namespace) -> None:
    from lmtransfer.cli import experiments
    from lmtransfer.course import experiment as course
    from lmtransfer.course.comparison import lab_lines
    from lmtransfer.course.corpus import write_french_corpus
    from lmtransfer.course.files import DEFAULT_URL, Manifest, gather, read_manifest
    from lmtransfer.reporting.experiments import dvc_env
    from lmtransfer.reporting.result_files import read_result_json, reading

    root = args.root
    profile = experiments.profile_changes(root / experiments.PROFILES / "course.yaml")
    experiments.overlaid_params(root, profile + args.changes)  # a bad --set stops before any download
    manifest = read_manifest(args.manifest) if args.manifest else Manifest()
    raw = root / course.RAW
    present = gather(raw, manifest, args.source, args.url or DEFAULT_URL)
    print(f"course: {len(present)} files of {manifest.repository} at {manifest.commit[:7]} checked in {raw}")
    plan = course.plan_for(present, args.changes)
    if plan.write_bible:
        write_french_corpus(raw)
    if args.fetch_only:
        return
    params = experiments.overlaid_params(root, profile + plan.changes)  # a bad one stops here, before any work
    experiments.require_committed_params(root, profile + plan.changes)
    train_tokens = sum(len(line.split()) + 1 for line in (raw / "cls-books" / "train.review.spm").open(encoding="utf-8"))
    print(f"course: the pretrained variant: {plan.pretrained}; about "
          f"{course.estimate_minutes(params, train_tokens):.0f} min on 2 CPU cores (a GPU: minutes); each stage "
          "shows its progress")
    seconds = course.run_pipeline(experiments.profile_command("course", profile + plan.changes), root, dvc_env())
    path = root / "metrics" / "evaluate.json"
    report = read_result_json(path, "the course's evaluation metrics")
    with reading(path, "the course's evaluation metrics"):
        print("\n" + "\n".join(lab_lines(report)))
    print(f"\ncourse: {seconds / 60:.1f} min; the workspace holds the experiment `course` (plots/, `lmtransfer "
          "results`); back to the committed run: git checkout params.yaml dvc.lock metrics && dvc checkout")


def add_commands(command: Callable[..., argparse.ArgumentParser]) -> None:
    course = command(
        "course", "lab 2 of the ALTEGRAD course on its own files: fetched and checked, pretrained against scratch",
        "Gets the course's files (github.com/moussaKam/transfer_learning_transformers at a pinned commit, or "
        "--from a folder or clone), checks each by its git blob id and sha256, puts them in data/course/, "
        "runs the pipeline as the DVC experiment `course` (profiles/course.yaml: the course's network and "
        "fine-tuning schedule) and prints the lab's comparison. With the course's language model among the files it is "
        "loaded; without it a French model is pretrained here, 3 runs. A missing, cut or changed file is named "
        "and nothing is changed.",
    )
    course.add_argument("--from", dest="source", type=Path, metavar="FOLDER",
                        help="take the files from this folder or clone instead of downloading them (offline)")
    course.add_argument("--url", help="download from this address instead (the files under their repository "
                        "paths; default: the repository's raw files at the pinned commit)")
    course.add_argument("--manifest", type=Path, help="check against this JSON instead of the pinned commit's "
                        "files (another commit or a fork): {\"repository\", \"commit\", \"files\": [{\"path\", "
                        "\"git_blob\" and/or \"sha256\", \"size\", \"required\"}]}")
    course.add_argument("--set", dest="changes", action="append", default=[], metavar="KEY=VALUE",
                        help="one more change for this run, as `dvc exp run -S` (repeatable), "
                        "e.g. --set 'finetune.seeds=[3,4,5]'")
    course.add_argument("--fetch-only", action="store_true", help="get and check the files, run nothing")
    course.add_argument("--root", type=Path, default=Path("."), help="the repository root")
    course.set_defaults(func=cmd_course)
