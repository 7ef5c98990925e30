"""Is your run's gap consistent with the committed one? Each gap has its own 95% interval, so the difference of the
two has a standard error sqrt(se1² + se2²) (each se = width / (2 × 1.96)); a two-sided z-test on it says whether
the runs disagree by more than their noise (another CPU gets another draw of the same experiment)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from scipy import stats

Z95 = stats.norm.ppf(0.975)
# the headline keys of the gap and its interval, per task (metrics/headline.json)
GAP_KEYS = {"classification": ("gap", "gap_low", "gap_high"), "translation": ("gap", "ci95_low", "ci95_high")}


def difference_test(ours: tuple[float, float, float], theirs: tuple[float, float, float]) -> tuple[float, float]:
    """(difference of the gaps, two-sided p) for two (gap, low, high) of independent runs."""
    se = [(high - low) / (2 * Z95) for _, low, high in (ours, theirs)]
    difference, spread = ours[0] - theirs[0], (se[0] ** 2 + se[1] ** 2) ** 0.5
    if spread == 0:
        return difference, float(difference == 0)
    return difference, float(2 * stats.norm.sf(abs(difference) / spread))


def committed_headline(path: Path, root: Path = Path(".")) -> dict | None:
    """The file as the checked-out commit holds it; None outside git or where it has none."""
    shown = subprocess.run(["git", "show", f"HEAD:{path.as_posix()}"], cwd=root, capture_output=True, text=True)
    return json.loads(shown.stdout) if shown.returncode == 0 else None


def consistency_lines(headline: dict, committed: dict | None, task: str, against: str) -> list[str]:
    keys = GAP_KEYS[task]
    if committed is None:
        return [f"no committed run to compare with ({against})"]
    ours, theirs = (tuple(float(h[key]) for key in keys) for h in (headline, committed))
    difference, p = difference_test(ours, theirs)
    verdict = "consistent with" if p >= 0.05 else "NOT consistent with"
    return [f"gap {ours[0]:+.4f} [{ours[1]:+.4f}, {ours[2]:+.4f}] against the committed {theirs[0]:+.4f} "
            f"[{theirs[1]:+.4f}, {theirs[2]:+.4f}] ({against})",
            f"difference {difference:+.4f}, p = {p:.3f} (z-test, each gap's own interval): {verdict} the committed run"]
