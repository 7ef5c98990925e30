"""What a `make run` gives per CPU vendor: the same pinned kernels still round differently on an Intel Xeon and an
AMD EPYC (MKL keeps its AVX2 branch for Intel CPUs and takes its automatic one elsewhere), so each vendor measured
keeps its own reference (`results/reference/<vendor>.json`), and a rerun is compared with its own vendor's.

    lmtransfer results --reference        # this run's headline beside each vendor's reference
    lmtransfer results --save-reference   # this machine's vendor's reference, from metrics/ (after `make run`)
    lmtransfer results --translation --reference        # the same for the translation pipeline
    lmtransfer results --translation --save-reference   # (translation/reference/<vendor>.json)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from numbers import Real
from pathlib import Path

from lmtransfer.core.errors import LmtransferError
from lmtransfer.core.io import write_json
from lmtransfer.core.paths import EVALUATE_REPORT, HEADLINE, METRICS
from lmtransfer.reporting.result_files import read_result_json

REFERENCES = Path("results/reference")


@dataclass(frozen=True)
class Pipeline:
    """What a reference holds for one pipeline: where it lives, the command that made it, the headline keys a
    comparison reads (the gap and its interval last), and the per-run scores kept beside them."""

    folder: Path
    command: str
    keys: tuple[str, ...]
    per_run: str  # the report's per-run list of the headline score

    @property
    def interval(self) -> tuple[str, str, str]:
        return self.keys[-3], self.keys[-2], self.keys[-1]


CLASSIFICATION = Pipeline(REFERENCES, "make run", ("pretrained", "scratch", "gap", "gap_low", "gap_high"),
                          "accuracy_per_seed")
TRANSLATION = Pipeline(Path("translation/reference"), "make run-translation",
                       ("bleu_pretrained", "bleu_scratch", "gap", "ci95_low", "ci95_high"), "bleu_per_seed")


def reference_from(report: dict, headline: dict, identity: dict[str, str], pipeline: Pipeline = CLASSIFICATION) -> dict:
    """A vendor's reference: the machine, the design (runs), the headline and every run's test score."""
    runs = ({"n_pretraining_runs": headline["n_pretraining_runs"], "n_runs": headline["n_seeds"]}
            if pipeline is TRANSLATION else
            {"n_pretraining_runs": report["n_pretraining_runs"], "n_finetuning_seeds": report["n_finetuning_seeds"]})
    return {
        "cpu_vendor": identity["cpu_vendor"],
        "cpu_model": identity["cpu_model"],
        "command": pipeline.command,
        **runs,
        "headline": headline,
        "pretrained_per_run": report["pretrained"][pipeline.per_run],
        "scratch_per_run": report["scratch"][pipeline.per_run],
    }


def save_reference(identity: dict[str, str], metrics: Path = METRICS, root: Path = Path("."),
                   pipeline: Pipeline = CLASSIFICATION) -> Path:
    """Write this machine's vendor's reference from `metrics/`; refuse metrics another CPU produced."""
    report = read_result_json(metrics / EVALUATE_REPORT.name, "evaluation results")
    produced_on = report["pretraining"].get("cpu_model")
    if produced_on != identity["cpu_model"]:
        raise LmtransferError(f"{metrics / EVALUATE_REPORT.name}: produced on {produced_on!r}, but this machine is "
                              f"{identity['cpu_model']!r}: run `{pipeline.command}` here first, then save its reference")
    headline = read_result_json(metrics / HEADLINE.name, "headline")
    path = root / pipeline.folder / f"{identity['cpu_vendor']}.json"
    write_json(path, reference_from(report, headline, identity, pipeline))
    return path


def read_reference(path: Path, pipeline: Pipeline = CLASSIFICATION) -> dict:
    """One vendor's reference, checked: a file that is not one names itself and the way to write a good one."""
    remedy = f"delete it, or rewrite it with `lmtransfer results --save-reference` after `{pipeline.command}`"
    try:
        reference = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LmtransferError(f"{path}: not a readable reference ({exc}); {remedy}") from None
    headline = reference.get("headline") if isinstance(reference, dict) else None
    if not isinstance(headline, dict):
        raise LmtransferError(f"{path}: no 'headline' object, so not a reference; {remedy}")
    wrong = [key for key in pipeline.keys
             if not isinstance(headline.get(key), Real) or isinstance(headline.get(key), bool)]
    if wrong:
        raise LmtransferError(f"{path}: headline.{wrong[0]} is missing or not a number; {remedy}")
    return reference


def references(root: Path = Path("."), pipeline: Pipeline = CLASSIFICATION) -> dict[str, dict]:
    """Every committed reference, by vendor."""
    return {path.stem: read_reference(path, pipeline) for path in sorted((root / pipeline.folder).glob("*.json"))}


def comparison_lines(headline: dict, identity: dict[str, str], saved: dict[str, dict],
                     pipeline: Pipeline = CLASSIFICATION) -> list[str]:
    """This run's headline beside each vendor's reference, its own vendor's first, with the differences."""
    if not saved:
        return [f"no reference saved yet ({pipeline.folder}/): `lmtransfer results --save-reference` after "
                f"{pipeline.command}"]
    order = sorted(saved, key=lambda vendor: vendor != identity["cpu_vendor"])
    keys = [key for key in headline if all(isinstance(saved[vendor]["headline"].get(key), Real) for vendor in order)]
    lines = [f"this run: {identity['cpu_model']} ({identity['cpu_vendor']})",
             f"  {'':<24}{'this run':>10}" + "".join(f"{vendor:>16}{'diff':>9}" for vendor in order)]
    for key in keys:
        cells = "".join(f"{saved[vendor]['headline'][key]:>16.4f}{headline[key] - saved[vendor]['headline'][key]:>+9.4f}"
                        for vendor in order)
        lines.append(f"  {key:<24}{headline[key]:>10.4f}{cells}")
    own = saved.get(identity["cpu_vendor"])
    if own is None:
        lines.append(f"no reference for {identity['cpu_vendor']} yet: `lmtransfer results --save-reference` keeps "
                     "this run's")
    else:
        gap, low_key, high_key = pipeline.interval
        low, high = own["headline"][low_key], own["headline"][high_key]
        inside = low <= headline[gap] <= high
        lines.append(f"the gap {headline[gap]:+.4f} is {'inside' if inside else 'OUTSIDE'} the {identity['cpu_vendor']} "
                     f"reference's 95% interval [{low:+.4f}, {high:+.4f}]")
    return lines
