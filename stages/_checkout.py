"""Puts this checkout's `src/` first on the import path, then loads `lmtransfer` from it, before any stage imports
torch or mlflow (the package pins the CPU kernels and turns telemetry off when it loads).

`dvc exp run --temp` and `dvc exp run --queue` run the stages in a copy of the repository
(`.dvc/tmp/exps/...`) that holds the experiment's own code, while the editable install
(`pip install -e .`) points at the main checkout, whose code may have moved on meanwhile.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import lmtransfer  # noqa: E402, F401 - from the path just set, before torch and mlflow
