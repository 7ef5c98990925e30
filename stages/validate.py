"""Stage validate: check every input before any stage runs; write the manifest of external files.

Runs on every `dvc repro` (always_changed) and takes a second or so; a broken
input stops the pipeline here, with every earlier output still in place.
"""

import _checkout  # noqa: F401 - first: this checkout's src/, then lmtransfer (it pins the CPU kernels)

from lmtransfer.classification.config import load_params
from lmtransfer.classification.inputs import check_inputs
from lmtransfer.core.io import write_json
from lmtransfer.core.paths import INPUTS, PARAMS
from lmtransfer.harness.stage import stage_main


@stage_main("validate")
def main() -> None:
    manifests = check_inputs(load_params(PARAMS))
    for name, entries in manifests.items():
        write_json(INPUTS / f"{name}.json", {"inputs": entries})
    described = ", ".join(f"{e['key']}={e['path']}" for entries in manifests.values() for e in entries)
    print(f"validate: inputs ok ({described}) -> {INPUTS}/")


if __name__ == "__main__":
    main()
