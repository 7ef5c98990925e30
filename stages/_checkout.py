"""Puts this checkout's `src/` first on the import path, before any stage imports `lmtransfer`.

`dvc exp run --temp` and `dvc exp run --queue` run the stages in a copy of the repository
(`.dvc/tmp/exps/...`) that holds the experiment's own code, while the editable install
(`pip install -e .`) points at the main checkout, whose code may have moved on meanwhile.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
