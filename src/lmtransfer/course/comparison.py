"""The lab's comparison printed at the end of `lmtransfer course`, beside the course's published numbers."""

from __future__ import annotations

# What the course's material reports for lab 2 (CLS books, its 4-layer model): test accuracy from scratch about
# 78%, pretrained 80-83%; students' write-ups show validation accuracy after the first epoch of about 75%
# pretrained against 50% from scratch, both near 83% by the end.
PUBLISHED = {
    "scratch_test": "about 0.78",
    "pretrained_test": "0.80 to 0.83",
    "first_epoch": "about 0.75 pretrained against 0.50 from scratch",
    "last_epoch": "both about 0.83",
}


def _cell(mean: float, sd: float) -> str:
    return f"{mean:.3f} ± {sd:.3f}"


def lab_lines(report: dict) -> list[str]:
    pretrained, scratch, gap = report["pretrained"], report["scratch"], report["gap"]
    runs = report["n_seeds"]
    lines = [f"The course's experiment on its files: {report['n_test_examples']:,} test reviews, "
             f"{runs} runs per variant ({report['n_pretraining_runs']} pretraining run(s) x "
             f"{report['n_finetuning_seeds']} fine-tuning seed(s))", "",
             "validation accuracy per epoch (mean ± sd over the runs):",
             f"  {'epoch':>5}  {'pretrained':>15}  {'scratch':>15}  {'difference':>10}"]
    curves = zip(*(variant[f"val_accuracy_{kind}_per_epoch"] for variant in (pretrained, scratch)
                   for kind in ("mean", "std")))
    lines += [f"  {epoch:>5}  {_cell(p, p_sd):>15}  {_cell(s, s_sd):>15}  {p - s:>+10.3f}"
              for epoch, (p, p_sd, s, s_sd) in enumerate(curves, start=1)]
    lines += ["", "test accuracy (each run at its best validation epoch):",
              f"  pretrained  {_cell(pretrained['accuracy_mean'], pretrained['accuracy_std'])}   "
              f"course: {PUBLISHED['pretrained_test']}",
              f"  scratch     {_cell(scratch['accuracy_mean'], scratch['accuracy_std'])}   "
              f"course: {PUBLISHED['scratch_test']}",
              f"  gap         {gap['accuracy_mean']:+.4f}, 95% interval [{gap['ci95_low']:+.4f}, "
              f"{gap['ci95_high']:+.4f}], p = {gap['p_value']:.3g}",
              f"  TF-IDF + logistic regression on the same pieces: {report['baseline']['accuracy']:.4f}",
              f"  the course's write-ups, validation: epoch 1 {PUBLISHED['first_epoch']}; "
              f"last epoch {PUBLISHED['last_epoch']}"]
    return lines
