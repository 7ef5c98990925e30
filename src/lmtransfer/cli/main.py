"""`lmtransfer`: look inside the model, talk to it, classify or translate new text, compare experiments.

    lmtransfer results [--translation] [--against results/reviews-cpu/metrics]   # the last run's answer
    lmtransfer summary [--translation]           # the model params.yaml configures, block by block
    lmtransfer params [--check params.yaml]      # every parameter: value and meaning (or: is every key valid?)
    lmtransfer generate "the movie was" --tokens 30 --temperature 0.8
    lmtransfer predict "a wonderful, moving film" "dull and far too long"
    lmtransfer profile reviews                   # a variant (profiles/reviews.yaml) as the DVC experiment `reviews`
    lmtransfer compare --by finetune.lr          # the `dvc exp run`s of this commit side by side
    lmtransfer report --check                    # are README.md's and docs/'s tables those of the results?
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from lmtransfer.cli import experiments, models
from lmtransfer.cli.args import POSITIVE, HelpFormatter, command
from lmtransfer.core import knobs, paths
from lmtransfer.core.errors import LmtransferError

SHAPE = {"d_model": "D", "n_layers": "N", "n_heads": "A", "d_ff": "F"}
DEFAULT_PARAMS = Path("params.yaml")  # compared by identity: an explicit `--params params.yaml` must exist
TRANSLATION = paths.TRANSLATION_ROOT
TRANSLATION_PARAMS = TRANSLATION / "params.yaml"  # `--translation`'s default, likewise


def parameter_table(sizes: dict[str, int], origin: str) -> str:
    """Per-block parameter counts, measured on real modules, next to their closed-form totals."""
    from lmtransfer.modeling.model import Classifier, LanguageModel, ModelConfig, expected_base_parameters
    from lmtransfer.modeling.model import count_parameters as count

    V, D, N, A, F, C = (sizes[letter] for letter in "VDNAFC")  # the letters the table prints
    config = ModelConfig(vocab_size=V, d_model=D, n_layers=N, n_heads=A, d_ff=F, dropout=0.0)
    classifier, language_model = Classifier(config, C), LanguageModel(config)
    base, layer = classifier.base, classifier.base.layers.layers[0]
    rows = [("token embedding (V x D)", count(base.token_embedding), f"{V} x {D}")]
    for name, modules in (("self-attention (4(D^2+D))", [layer.self_attn]),
                          ("feed-forward (2DF+F+D)", [layer.linear1, layer.linear2]),
                          ("layer norms (4D)", [layer.norm1, layer.norm2])):
        per_layer = sum(count(module) for module in modules)
        rows.append((f"{name} x {N}", per_layer * N, f"{per_layer:,} per layer"))
    rows += [("positional encoding (fixed)", 0, "sinusoidal buffer"),
             ("= base", count(base), f"formula {expected_base_parameters(V, D, N, F):,}"),
             ("classification head (D x C + C)", count(classifier.head), f"C = {C}"),
             ("language-model head (D x V + V)", count(language_model.head), f"V = {V}")]
    width = max(len(name) for name, _, _ in rows)
    return "\n".join([f"V={V} D={D} N={N} A={A} F={F} C={C}", origin, "",
                      *(f"{name:<{width}}  {number:>12,}  {note}" for name, number, note in rows), "",
                      f"{'classifier total':<{width}}  {count(classifier):>12,}",
                      f"{'language model total':<{width}}  {count(language_model):>12,}"])


def load_any_task_params(path: Path):
    from lmtransfer.classification.config import parse_classification_params
    from lmtransfer.core.config import read_params_file, split_task
    from lmtransfer.translation.config import parse_translation_params

    raw = read_params_file(path)
    task, _ = split_task(raw, str(path))
    return (parse_translation_params if task == "translation" else parse_classification_params)(raw, str(path))


def _existing(path: Path, named_by: str) -> Path:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file ({named_by})")
    return path


def dictionary_size(path: Path, named_by: str) -> int:
    from lmtransfer.tokens.tokenizer import DictionaryTokenizer, read_fairseq_dictionary

    return DictionaryTokenizer(read_fairseq_dictionary(_existing(path, named_by))).vocab_size


def vocab_size_from_tokenizer_params(tokenizer, root: Path) -> tuple[int, str]:
    """V as the tokenize stage will make it, without running it."""
    from lmtransfer.tokens.tokenizer import SentencePieceTokenizer

    if tokenizer.vocab_file:
        path = root / tokenizer.vocab_file
        return dictionary_size(path, "tokenizer.vocab_file"), f"tokenizer.vocab_file ({path})"
    if tokenizer.model_file:
        path = _existing(root / tokenizer.model_file, "tokenizer.model_file")
        model = SentencePieceTokenizer(path.read_bytes(), f"{path} (tokenizer.model_file)")
        return model.vocab_size, f"tokenizer.model_file ({path})"
    return tokenizer.vocab_size, "tokenizer.vocab_size"


def configured_model(args: argparse.Namespace) -> tuple[dict[str, int], str]:
    """V, C, D, N, A, F of the model the project would build, and where each came from: a flag wins; else D, N, A, F
    from the params file, V and C from the tokenized data once tokenize ran, else V from the tokenizer params, C = 2."""
    from lmtransfer.modeling.model import check_shape
    from lmtransfer.reporting.result_files import read_result_json

    params_file: Path = TRANSLATION_PARAMS if args.translation and args.params is DEFAULT_PARAMS else args.params
    have_params = params_file.is_file() or params_file not in (DEFAULT_PARAMS, TRANSLATION_PARAMS)
    params = load_any_task_params(params_file) if have_params else None
    meta_file = params_file.parent / paths.TOKENIZED / "meta.json"
    meta = read_result_json(meta_file, "the tokenized data's meta") if meta_file.is_file() else None
    flags = vars(args)  # the size flags are absent unless given (default=SUPPRESS)

    def needs_params(flag: str) -> None:
        if params is None:
            raise SystemExit(f"error: no {params_file} here to read the model from: run in the project's folder, "
                             f"name a params file with --params, or give {flag}")

    chosen: dict[str, tuple[int, str]] = {}
    if "vocab_size" in flags:
        chosen["V"] = args.vocab_size, "from --vocab-size"
    elif "vocab_file" in flags:
        size = dictionary_size(args.vocab_file, "--vocab-file")
        chosen["V"] = size, f"from --vocab-file ({args.vocab_file}: {size - 4:,} entries + 4 special ids)"
    elif meta is not None:
        chosen["V"] = meta["vocab_size"], f"from {meta_file}"
    else:
        needs_params("--vocab-size")
        size, source = vocab_size_from_tokenizer_params(params.tokenizer, params_file.parent)
        chosen["V"] = size, f"from {source} in {params_file}"
    if "n_classes" in flags:
        chosen["C"] = args.n_classes, "from --n-classes"
    elif meta is not None and "label_names" in meta:
        chosen["C"] = len(meta["label_names"]), f"from {meta_file}"
    elif args.translation or meta is not None:  # sentence pairs: no classes
        chosen["C"] = 2, "unused (sentence pairs, no classes)"
    else:
        chosen["C"] = 2, f"= 2, assumed (no {meta_file} yet; --n-classes sets it)"
    for key, letter in SHAPE.items():
        flag = f"--{key.replace('_', '-')}"
        if key not in flags:
            needs_params(flag)
        chosen[letter] = (flags[key], f"from {flag}") if key in flags else (getattr(params.model, key),
                                                                           f"from {params_file}")
    sizes = {letter: size for letter, (size, _) in chosen.items()}
    grouped: dict[str, list[str]] = {}  # `V, C from ...; D, N, A, F from ...`
    for letter, (_, origin) in chosen.items():
        grouped.setdefault(origin, []).append(letter)
    try:
        check_shape(sizes["D"], sizes["A"])
    except ValueError as exc:
        raise SystemExit(f"error: {exc} (D {chosen['D'][1]}, A {chosen['A'][1]})") from None
    lines = ["; ".join(f"{', '.join(letters)} {origin}" for origin, letters in grouped.items()),
             attention_line(params, sizes["D"])]
    if params is not None and chosen["V"][1] == f"from {meta_file}":
        lines += stale_vocabulary_note(sizes["V"], params.tokenizer, params_file)
    return sizes, "\n".join(lines)


def stale_vocabulary_note(vocab_size: int, tokenizer, params_file: Path) -> list[str]:
    """data/tokenized is the last tokenize run's: say so when the tokenizer params now give another V."""
    try:
        configured, source = vocab_size_from_tokenizer_params(tokenizer, params_file.parent)
    except (OSError, ValueError):  # a broken tokenizer file is the validate stage's to report
        return []
    if configured == vocab_size:
        return []
    return [f"note: {source} in {params_file} now gives V = {configured}; the tokenized data is older "
            "(`dvc repro tokenize` updates it; --vocab-size shows the other size)"]


def attention_line(params, d_model: int) -> str:
    """How the base attends; next-sentence prediction's extra parameters, which only pretraining has."""
    from lmtransfer.modeling.model import MaskedLanguageModel, ModelConfig, count_parameters

    if params is None:
        return "attention causal (the course's; no params file says otherwise)"
    objective = params.pretrain.objective
    line = (f"attention {'causal' if params.causal_attention else 'bidirectional'} "
            f"(model.attention {params.model.attention}, pretrain.objective {objective})")
    if params.pretrain.nsp:
        tiny = MaskedLanguageModel(ModelConfig(vocab_size=1, d_model=d_model, n_layers=1, n_heads=1, d_ff=1,
                                               dropout=0.0, causal=False), next_sentence=True)
        extra = count_parameters(tiny.segment_embedding) + count_parameters(tiny.next_sentence_head)
        line += (f"; next-sentence prediction adds {extra:,} parameters while pretraining (segment embeddings "
                 "2 x D, head D x 2 + 2), folded away for the classifier")
    return line


def cmd_summary(args: argparse.Namespace) -> None:
    sizes, origin = configured_model(args)
    if args.translation:
        from lmtransfer.translation.model import TranslationConfig
        from lmtransfer.translation.summary import translation_parameter_table

        config = TranslationConfig(sizes["V"], sizes["D"], sizes["N"], sizes["N"], sizes["A"], sizes["F"], dropout=0.0)
        print(translation_parameter_table(config, origin))
        return
    print(parameter_table(sizes, origin))


def cmd_params(args: argparse.Namespace) -> None:
    from lmtransfer.cli.params_tables import params_table, update_readme

    if args.check is not None:
        if not Path(args.check).is_file():  # before DVC's "Could not find 'pretrain.seeds'" (`make run` runs this)
            raise SystemExit(f"error: {args.check}: parameter file not found; the pipeline reads its parameters there: "
                             f"restore it (git checkout -- {args.check}) or write one")
        load_any_task_params(args.check)  # a bad key: ConfigError naming the file and the key
        print(f"{args.check}: every parameter valid")
    elif "readme" not in vars(args):
        print(params_table("translation" if args.translation else "classification"), end="")
    elif update_readme(args.readme):
        print(f"{args.readme}: parameter tables regenerated")
    else:
        print(f"{args.readme}: parameter tables already up to date")


def cmd_results(args: argparse.Namespace) -> None:
    from lmtransfer.reporting.result_files import committed_headline, consistency_lines, read_result_json, reading

    metrics = TRANSLATION / paths.METRICS if args.translation and args.metrics == paths.METRICS else args.metrics
    path = metrics / paths.EVALUATE_REPORT.name
    what = "translation results" if args.translation else "evaluation metrics"
    report = read_result_json(path, what)
    with reading(path, what):
        if args.translation:
            from lmtransfer.translation.evaluate import report_lines

            print("\n".join(report_lines(report)))
        else:
            print(results_report(report))
    path = metrics / paths.HEADLINE.name
    headline = read_result_json(path, "headline")
    if args.against is None:
        committed, against = committed_headline(path), f"{path} as the checked-out commit holds it"
    else:
        committed, against = read_result_json(args.against / paths.HEADLINE.name, "headline"), str(args.against)
    with reading(path, "headline"):
        print("\n" + "\n".join(consistency_lines(headline, committed, "translation" if args.translation
                                                 else "classification", against)))


def results_report(report: dict) -> str:
    """The answer in a few lines: test scores, the gap with its interval, the baseline, validation per epoch."""
    from lmtransfer.classification.evaluate import runs_described, spread_line
    from lmtransfer.reporting.result_files import read_result_json

    pretraining = report["pretraining"]  # metrics/pretrain/*.json are DVC-cached: evaluate.json carries them in git
    gap = report["gap"]

    def spread(variant: str, key: str) -> str:
        return f"{report[variant][f'{key}_mean']:.4f} ± {report[variant][f'{key}_std']:.4f}"

    lines = [
        f"test ({report['n_test_examples']} examples; mean ± std over {runs_described(report)})",
        f"  {'':<34}{'accuracy':>18}{'macro-F1':>18}",
        f"  {'pretrained':<34}{spread('pretrained', 'accuracy'):>18}{spread('pretrained', 'macro_f1'):>18}",
        f"  {'from scratch':<34}{spread('scratch', 'accuracy'):>18}{spread('scratch', 'macro_f1'):>18}",
        f"  {'TF-IDF + logistic regression':<34}{report['baseline']['accuracy']:>18.4f}"
        f"{report['baseline']['macro_f1']:>18.4f}",
        f"  gap (pretrained - scratch): {gap['accuracy_mean']:+.4f} accuracy, 95% CI "
        f"[{gap['ci95_low']:+.4f}, {gap['ci95_high']:+.4f}], p = {gap['p_value']:.4g}",
        f"  ({spread_line(gap, report['n_finetuning_seeds'])})",
        "",
        f"  {'epoch':<8}{'val acc pretrained':>20}{'val acc scratch':>18}{'gap':>10}",
    ]
    curves = zip(report["pretrained"]["val_accuracy_mean_per_epoch"], report["scratch"]["val_accuracy_mean_per_epoch"])
    for epoch, (pretrained, scratch) in enumerate(curves, start=1):
        lines.append(f"  {epoch:<8}{pretrained:>20.4f}{scratch:>18.4f}{pretrained - scratch:>+10.4f}")
    lines += [
        f"  (TF-IDF baseline on the same validation split: {report['baseline']['valid_accuracy']:.4f})",
        "",
        f"pretraining: {len(pretraining['seeds'])} runs of {pretraining['steps']:.0f} steps, "
        f"{pretraining['tokens_seen']:,.0f} tokens, validation perplexity {pretraining['val_perplexity']:.1f} "
        "(mean of the runs)",
    ]
    timings = paths.timings_file(paths.PretrainOutputs(pretraining["seeds"][0]).stage)
    if timings.is_file():
        lines[-1] += f", {read_result_json(timings, 'timings')['tokens_per_second']:,.0f} tokens/s on this machine"
    return "\n".join(lines)


def cmd_report(args: argparse.Namespace) -> None:
    from lmtransfer.reporting.pages import check_pages, write_pages

    if args.check:
        problems = check_pages(args.root)
        if problems:
            print(*problems, sep="\n", file=sys.stderr)
            raise SystemExit(f"error: {len(problems)} table(s) or figure(s) differ from the committed result files")
        print("README.md and docs/: every results table and figure matches the committed result files")
        return
    changed = write_pages(args.root)
    print("\n".join(f"{path}: regenerated" for path in changed) or "results tables and figures already up to date")


def add_summary_command(commands: argparse._SubParsersAction) -> None:
    summary = command(
        commands, "summary", "parameter table per block, with the closed-form totals",
        "Parameter counts per block of the model the project is configured to build, with the closed-form totals: "
        "D, N, A, F from --params, V and C from data/tokenized/meta.json once tokenize ran, else V from the "
        "tokenizer params and C = 2 (said so). Each flag below overrides one value.",
    )
    summary.add_argument("--params", type=Path, default=DEFAULT_PARAMS,
                         help="the params file whose model to describe (default: params.yaml, with --translation "
                              "translation/params.yaml)")
    vocabulary = summary.add_mutually_exclusive_group()  # the size flags stay absent unless given (SUPPRESS)
    vocabulary.add_argument("--vocab-size", type=POSITIVE, default=argparse.SUPPRESS, metavar="V",
                            help="token ids (default: from data/tokenized/meta.json, else the tokenizer params)")
    vocabulary.add_argument("--vocab-file", type=Path, default=argparse.SUPPRESS, metavar="DICT",
                            help="V = this fairseq dictionary's entries + 4 special ids (default: as --vocab-size)")
    for flag, letter, what in (("--d-model", "D", "model width"), ("--n-layers", "N", "Transformer layers"),
                               ("--n-heads", "A", "attention heads"), ("--d-ff", "F", "feed-forward units per layer")):
        summary.add_argument(flag, type=POSITIVE, default=argparse.SUPPRESS, metavar=letter,
                             help=f"{what} (default: model.{flag[2:].replace('-', '_')} of --params)")
    summary.add_argument("--n-classes", type=POSITIVE, default=argparse.SUPPRESS, metavar="C",
                         help="classes of the classification head (default: data/tokenized/meta.json's, else 2)")
    summary.add_argument("--translation", action="store_true",
                         help="the encoder-decoder for translation instead (N layers on each side)")
    summary.set_defaults(func=cmd_summary)


def add_commands(commands: argparse._SubParsersAction) -> None:
    """`params`, `results` and `report`."""
    params = command(commands, "params", "every parameter of params.yaml: its value and meaning (Markdown)",
                     "Every key of params.yaml (or translation/params.yaml) with its value, meaning and the stages "
                     "that read it, as the Markdown tables of docs/guide/parameters.md.")
    params.add_argument("--translation", action="store_true", help="translation/params.yaml's parameters instead")
    params.add_argument("--readme", type=Path, default=argparse.SUPPRESS, metavar="FILE",
                        help="instead of printing, rewrite the tables between the params-table markers of FILE "
                             "(default: print one)")
    params.add_argument("--check", type=Path, default=None, metavar="FILE",
                        help="instead, check every key of the params file FILE and name the first bad one (what "
                             "`make run` does before `dvc repro`, whose reading of the stage grid names no key)")
    params.set_defaults(func=cmd_params)

    results = command(commands, "results", "test scores and validation curves of the last pipeline run, and whether "
                      "its gap is consistent with the committed run's")
    results.add_argument("--metrics", type=Path, default=paths.METRICS,
                         help="the metrics directory the pipeline wrote (with --translation: translation/metrics)")
    results.add_argument("--translation", action="store_true", help="the translation pipeline's results instead")
    results.add_argument("--against", type=Path, default=None, metavar="DIR",
                         help="compare the gap with DIR/headline.json (e.g. results/imdb-cpu/metrics) instead of "
                              "the committed one")
    results.set_defaults(func=cmd_results)

    report = command(commands, "report", "regenerate the results tables and figures of README.md and docs/",
                     "Rewrite every table between `<!-- report:KIND@FOLDER:start/end -->` markers of README.md and "
                     "docs/**/*.md from the result files in FOLDER, and copy each docs figure from its pipeline's "
                     "plot. With --check, change nothing: exit 1 naming each stale table by page and line.")
    report.add_argument("--check", action="store_true", help="only check that every table and figure is up to date")
    report.add_argument("--root", type=Path, default=Path("."), help="the repository root")
    report.set_defaults(func=cmd_report)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lmtransfer", description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("-V", "--version", action="version", version=f"%(prog)s {package_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (add_summary_command, add_commands, models.add_commands, experiments.add_commands):  # --help's order
        add(commands)
    return parser


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("lmtransfer")
    except PackageNotFoundError:
        return "unknown (not installed: pip install -e .)"


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        knobs.check()  # a bad LMTRANSFER_* value: one line, before any work
        args.func(args)
    except (LmtransferError, FileNotFoundError, ValueError) as exc:
        raise SystemExit(f"error: {exc}") from None
    except BrokenPipeError:  # `lmtransfer results | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes
        sys.exit(0)


program = main  # the `lmtransfer` entry point (pyproject.toml)
