"""The result files the commands read (a damaged one is named, with how to get it back), and whether a run's gap
is consistent with the committed one's: each gap has its own 95% interval (se = width / (2 × 1.96)), so a two-sided
z-test on their difference, se sqrt(se1² + se2²), says whether two runs disagree by more than their noise."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from scipy import stats

from lmtransfer.core.errors import LmtransferError
from lmtransfer.core.io import how_to_produce, require_file

Z95 = stats.norm.ppf(0.975)
# the headline keys of the gap and its interval, per task (metrics/headline.json)
GAP_KEYS = {"classification": ("gap", "gap_low", "gap_high"), "translation": ("gap", "ci95_low", "ci95_high")}


class ResultFileError(LmtransferError, ValueError):
    pass


def remedy(path: Path) -> str:
    return (f"rerun the stage that writes it ({how_to_produce(path)} reruns it once the file changed), or restore "
            f"the committed one (git checkout -- {path})")


def read_result_json(path: str | Path, what: str) -> Any:
    """`path` parsed as JSON; missing, not UTF-8 or not JSON: one line naming the file."""
    path = require_file(path, what)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ResultFileError(f"{path}: {what}, not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg}); "
                              f"{remedy(path)}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultFileError(f"{path}: {what}, cannot be read ({exc}); {remedy(path)}") from None


@contextmanager
def reading(path: str | Path, what: str) -> Iterator[None]:
    """Valid JSON without the keys a command reads: named, not a KeyError."""
    try:
        yield
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise ResultFileError(f"{path}: {what}, without what this command reads ({type(exc).__name__}: {exc}); "
                              f"{remedy(Path(path))}") from None


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
    if committed is None:
        return [f"no committed run to compare with ({against})"]
    ours, theirs = (tuple(float(h[key]) for key in GAP_KEYS[task]) for h in (headline, committed))
    difference, p = difference_test(ours, theirs)
    verdict = "consistent with" if p >= 0.05 else "NOT consistent with"
    return [f"gap {ours[0]:+.4f} [{ours[1]:+.4f}, {ours[2]:+.4f}] against the committed {theirs[0]:+.4f} "
            f"[{theirs[1]:+.4f}, {theirs[2]:+.4f}] ({against})",
            f"difference {difference:+.4f}, p = {p:.3f} (z-test, each gap's own interval): {verdict} the committed run"]
