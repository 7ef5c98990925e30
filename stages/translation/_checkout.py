"""The translation stages' import set-up, the same as the classification stages': ../_checkout.py run from here
(this checkout's `src/` first on the import path, then `lmtransfer` loaded from it, before torch or mlflow)."""

import runpy
from pathlib import Path

runpy.run_path(str(Path(__file__).resolve().parents[1] / "_checkout.py"))
