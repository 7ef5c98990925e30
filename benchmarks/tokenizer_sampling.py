"""Does a corpus too large for sentencepiece's trainer give the same tokenizer in every process? The project's
sample (`tokens.tokenizer.sampled_lines`: lines drawn by a seed, given to the trainer as they are) against
sentencepiece's own sampler (`input_sentence_size` with `shuffle_input_sentence`, the same seed set), side by side.

Each way trains the tokenize stage's model (tokenizer.* params as given) in `--processes` fresh processes,
alternating, and counts the distinct models (sha256 of the serialized model) and the distinct vocabularies (its
pieces and their scores: the model file also records the trainer's arguments). Default corpus: the reviews
profile's (`lmtransfer imdb`, then `dvc exp run prepare -S 'data.corpus=[imdb-reviews]'`), 96 MB.

    python benchmarks/tokenizer_sampling.py [--corpus data/prepared_corpus/corpus_train.txt]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from results_file import REPO, Column, write_result  # noqa: E402

TRAIN = """
import hashlib, json, sys, time
from pathlib import Path
import sentencepiece as spm
from lmtransfer.core.config import TokenizerParams
from lmtransfer.tokens import tokenizer
way, corpus, params = sys.argv[1], Path(sys.argv[2]), TokenizerParams(**json.loads(sys.argv[3]))
started = time.perf_counter()
if way == "project":
    model = tokenizer.train_sentencepiece(corpus, params)
else:  # the project's very trainer call, the lines sampled by sentencepiece itself
    own_sample = {"input": str(corpus), "shuffle_input_sentence": True,
                  "input_sentence_size": tokenizer.training_sample_lines(corpus, params.max_training_lines)}
    model = tokenizer._trained_model(own_sample, params, 0, corpus)
seconds = time.perf_counter() - started
pieces = spm.SentencePieceProcessor(model_proto=model)
vocabulary = [(pieces.id_to_piece(i), pieces.get_score(i)) for i in range(pieces.get_piece_size())]
print(json.dumps({"model": hashlib.sha256(model).hexdigest(), "seconds": seconds,
                  "vocabulary": hashlib.sha256(json.dumps(vocabulary).encode()).hexdigest()}))
"""
WAYS = {"project": "the project's sample (tokenizer.py)", "sentencepiece": "sentencepiece's own sampler"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=REPO / "data/prepared_corpus/corpus_train.txt",
                        help="a prepared corpus (one text a line)")
    parser.add_argument("--processes", type=int, default=3, help="fresh processes of each way, alternating")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a tokenizer.* param, e.g. --set max_training_lines=1000 (default: the defaults)")
    args = parser.parse_args()
    if not args.corpus.is_file():
        parser.error(f"{args.corpus}: no such corpus; for the default one run `lmtransfer imdb` and "
                     "`dvc exp run prepare -S 'data.corpus=[imdb-reviews]'`, or name one with --corpus")
    settings = {key: json.loads(value) if value[:1] in "0123456789[{-" else value
                for key, value in (item.split("=", 1) for item in args.set)}
    from lmtransfer.core.config import TokenizerParams
    from lmtransfer.tokens.tokenizer import corpus_line_count, training_sample_lines

    params = TokenizerParams(**settings)
    lines = corpus_line_count(args.corpus)
    sample = min(lines, training_sample_lines(args.corpus, params.max_training_lines, lines=lines))
    print(f"{args.corpus}: {lines:,} lines, {args.corpus.stat().st_size / 1e6:.1f} MB; trains on {sample:,}",
          flush=True)
    began = time.perf_counter()
    runs: dict[str, list[dict]] = {way: [] for way in WAYS}
    for number in range(args.processes):
        for way in WAYS:
            done = subprocess.run([sys.executable, "-c", TRAIN, way, str(args.corpus), json.dumps(settings)],
                                  capture_output=True, text=True, check=True)
            runs[way].append(json.loads(done.stdout))
            print(f"{way:>13} process {number + 1}: model {runs[way][-1]['model'][:12]}, "
                  f"{runs[way][-1]['seconds']:.1f} s", flush=True)
    rows = [[WAYS[way], lines, sample, len(found), len({run["model"] for run in found}),
             len({run["vocabulary"] for run in found}), statistics.median(run["seconds"] for run in found)]
            for way, found in runs.items()]
    for row in rows:
        print(f"{row[0]}: {row[4]} distinct models, {row[5]} distinct vocabularies in {row[3]} processes; "
              f"median {row[6]:.1f} s")
    write_result("tokenizer_sampling", [Column("sampling"), Column("corpus lines", ",.0f"),
                                        Column("sample lines", ",.0f"), Column("processes", ",.0f"),
                                        Column("distinct models", ",.0f"), Column("distinct vocabularies", ",.0f"),
                                        Column("training s", ".1f")], rows,
                 seconds=time.perf_counter() - began,
                 notes=f"corpus {args.corpus.relative_to(REPO) if args.corpus.is_relative_to(REPO) else args.corpus.name}"
                       f" ({args.corpus.stat().st_size / 1e6:.1f} MB); tokenizer params: defaults"
                       + "".join(f", {key}={value}" for key, value in settings.items())
                       + f"; {args.processes} fresh processes each, alternating")


if __name__ == "__main__":
    main()
