"""What logging a fine-tune as an MLflow model costs against logging its checkpoint as a plain file: seconds per
log and bytes in the artifact store, side by side in one run, on the pipeline's own checkpoint and tokenizer.

Each way logs into a fresh SQLite store in a temporary folder, `--repeats` times (the first also pays imports and
the store's first writes, so the median is reported).

    python benchmarks/mlflow_model_cost.py            # after make run: models/finetuned/pretrained/seed0-0.pt
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from results_file import Column, write_result  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def measure(checkpoint: Path, tokenizer: Path, repeats: int) -> dict[str, tuple[float, int]]:
    """Per way ('file', 'model'): the median seconds of one log and the bytes one log adds to the store."""
    import mlflow

    from lmtransfer.classification.mlflow_model import log_classifier
    from lmtransfer.modeling.checkpoint import load_checkpoint

    labels = load_checkpoint(checkpoint, "classifier")["label_names"]
    ways = {"file": lambda: mlflow.log_artifact(str(checkpoint)),
            "model": lambda: log_classifier(checkpoint, tokenizer, labels)}
    results = {}
    for name, log in ways.items():
        with tempfile.TemporaryDirectory() as folder:
            artifacts = Path(folder, "artifacts")
            mlflow.set_tracking_uri(f"sqlite:///{Path(folder, 'mlflow.db')}")
            experiment = mlflow.create_experiment(name, artifact_location=artifacts.as_uri())
            seconds = []
            for _ in range(repeats):
                with mlflow.start_run(experiment_id=experiment):
                    started = time.perf_counter()
                    log()
                    seconds.append(time.perf_counter() - started)
            results[name] = (statistics.median(seconds), folder_bytes(artifacts) // repeats)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", type=Path, default=REPO / "models/finetuned/pretrained/seed0-0.pt")
    parser.add_argument("--tokenizer", type=Path, default=REPO / "data/tokenized")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--notes", default="")
    args = parser.parse_args()
    started = time.perf_counter()
    results = measure(args.checkpoint, args.tokenizer, args.repeats)
    (file_s, file_b), (model_s, model_b) = results["file"], results["model"]
    rows = [["the checkpoint as a file (mlflow.log_artifact)", file_s, file_b / 1e6, 1.0],
            ["the checkpoint as an MLflow model (log_classifier)", model_s, model_b / 1e6, model_b / file_b]]
    for row in rows:
        print(f"{row[0]}: {row[1]:.2f} s, {row[2]:.2f} MB")
    write_result("mlflow_model_cost", [Column("one fine-tune's log"), Column("seconds (median)", ".2f"),
                                       Column("MB in the store", ".2f"), Column("bytes against the file", ".2f")],
                 rows, seconds=time.perf_counter() - started, notes=args.notes)


if __name__ == "__main__":
    main()
