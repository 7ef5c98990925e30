"""Progress for long loops: a live bar on a terminal, a line every 30 s in logs (DVC, CI)."""

from __future__ import annotations

import os
import sys

from tqdm import tqdm


def progress_bar(**kwargs) -> tqdm:
    interactive = sys.stderr.isatty()
    quiet = os.environ.get("RANK", "0") != "0"  # several processes (torchrun): rank 0 shows the progress
    disable = kwargs.pop("disable", False) or quiet
    return tqdm(mininterval=1.0 if interactive else 30.0, dynamic_ncols=interactive, disable=disable, **kwargs)
