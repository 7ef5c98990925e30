"""The `lmtransfer` command line."""

import argparse
import io
import json
import re
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
import torch
from ruamel.yaml import YAML

from lmtransfer.cli.main import build_parser, main
from lmtransfer.modeling.checkpoint import save_checkpoint
from lmtransfer.modeling.model import Classifier, ModelConfig
from lmtransfer.tokens.tokenizer import (
    SentencePieceTokenizer,
    save_tokenizer,
    tokenizer_fingerprint,
    train_sentencepiece,
)

from shipped import REPO, shipped, shipped_raw


@pytest.fixture(autouse=True)
def in_empty_dir(tmp_path, monkeypatch):
    """Every command runs where neither params.yaml nor data/tokenized exists, unless a test writes them."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _params(path: Path, text: str) -> None:
    """A params file: the repository's (translation's, under translation/) with the sections of `text` merged in."""
    changes = YAML(typ="safe").load(text) or {}
    raw = shipped_raw(changes, "translation" if path.parent.name == "translation" else "classification")
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as out:
        YAML(typ="safe").dump(raw, out)


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _meta(vocab_size: int, *labels: str) -> str:
    return json.dumps({"vocab_size": vocab_size, "label_names": list(labels)})


def test_every_command_and_option_has_clean_help_stating_each_default_once(capsys):
    """No `%%` left unformatted, no `(default: ...)` twice or empty, no internal module names."""
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert set(commands) == {"summary", "params", "generate", "fill", "results", "report", "predict", "translate",
                             "compare", "profile", "scaling", "course", "imdb", "register"}
    assert {"translate", "compare", "scaling"} <= set(parser.format_help().split())
    for name, sub in {"lmtransfer": parser, **commands}.items():
        text = " ".join(sub.format_help().split())  # undo the line wrapping
        assert sub.description and "%%" not in text and "%(" not in text and "cli." not in text, name
        assert not re.search(r"\(default: [^)]*\)\s*\(default:", text), name
        assert "(default: )" not in text and "(default: None)" not in text, name
        for action in [a for a in sub._actions if not isinstance(a, argparse._HelpAction)] if sub is not parser else []:
            where = f"{name} {'/'.join(action.option_strings) or action.dest}"
            assert action.help and len(action.help) > 10, f"{where} has no help text"
            if action.default is argparse.SUPPRESS or "default" in action.help:  # said in words, once
                assert "default" in action.help, f"{where} does not say what happens without it"
            elif action.default in (None, "", False) or not action.option_strings:
                assert "(default:" not in action.help, f"{where}: an empty default shown"
            else:
                shown = {f"(default: {action.default})", f"(default: {action.default!r})"}
                assert any(s in text for s in shown), f"{where}: its default is not in `lmtransfer {name} --help`"
    generate = " ".join(commands["generate"].format_help().split())
    assert all(f"(default: {value})" in generate for value in ("0.8", "40", "models/pretrained/seed0.pt"))


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version_prints_the_installed_version(flag, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([flag])
    assert exit_.value.code == 0 and capsys.readouterr().out.strip() == f"lmtransfer {version('lmtransfer')}"


MODEL_64 = "model:\n  n_layers: 2\n  d_model: 64\n  n_heads: 4\n  d_ff: 128\n"
FLAGS = ["--vocab-size", "100", "--d-model", "200", "--n-layers", "4", "--n-heads", "2", "--d-ff", "200"]
META = "data/tokenized/meta.json"
DICTIONARY = {"project/data/raw/dict.txt": "".join(f"p{i} 1\n" for i in range(10)),  # + <sos> <pad> <eos> <oov>
              "project/params.yaml": "data: {source: files, train: data/raw/train.spm, format: pieces}\n"
                                     "tokenizer: {vocab_file: data/raw/dict.txt}\n"}  # relative to params.yaml
TRANSLATION = {"params.yaml": "model:\n  n_layers: 4\n  d_model: 200\n  n_heads: 2\n  d_ff: 200\n",  # not read
               "translation/params.yaml": "task: translation\n"
                                          "model: {n_layers: 2, d_model: 128, n_heads: 4, d_ff: 512, dropout: 0.0}",
               f"translation/{META}": json.dumps({"vocab_size": 4000})}


@pytest.mark.parametrize("files, argv, first, expected", [
    ({}, [*FLAGS, "--n-classes", "2"], "V=100 D=200 N=4 A=2 F=200 C=2",
     ["V from --vocab-size; C from --n-classes; D from --d-model", "= base", "988,000", "988,402", "1,008,100"]),
    ({}, ["--vocab-size", "50001", *FLAGS[2:]], "V=50001 D=200 N=4 A=2 F=200 C=2",
     ["10,968,602", "21,018,401", "C = 2, assumed"]),
    ({"params.yaml": MODEL_64, META: _meta(300, "high", "low", "normal")}, [], "V=300 D=64 N=2 A=4 F=128 C=3",
     ["V, C from data/tokenized/meta.json; D, N, A, F from params.yaml\n", "86,339", "105,644"]),
    ({"params.yaml": "tokenizer:\n  vocab_size: 1000\n"}, [], "V=1000 D=256 N=2 A=2 F=256 C=2",
     ["V from tokenizer.vocab_size in params.yaml", "C = 2, assumed (no data/tokenized/meta.json yet",
      "1,048,066"]),
    ({"params.yaml": MODEL_64, META: _meta(300, "neg", "pos")}, ["--n-layers", "6", "--n-classes", "5"],
     "V=300 D=64 N=6 A=4 F=128 C=5",
     ["\nV from data/tokenized/meta.json; C from --n-classes; D, A, F from params.yaml; N from --n-layers\n"]),
    ({"params.yaml": "tokenizer:\n  vocab_size: 8000\n", META: _meta(4000, "neg", "pos")},
     [], "V=4000 D=256 N=2 A=2 F=256 C=2",
     ["note: tokenizer.vocab_size in params.yaml now gives V = 8000", "dvc repro tokenize"]),
    (DICTIONARY, ["--params", "{root}/project/params.yaml"], "V=14 D=256 N=2 A=2 F=256 C=2",
     ["V from tokenizer.vocab_file ({root}/project/data/raw/dict.txt) in {root}/project/params.yaml", "assumed"]),
    (TRANSLATION, ["--translation"], "encoder-decoder V=4000 D=128 N_enc=2 N_dec=2 A=4 F=512",
     ["from translation/params.yaml", "1,953,696"]),  # translation/params.yaml, not the params.yaml beside it
], ids=["flags", "french-vocabulary", "params-and-meta", "before-tokenize", "flags-override", "stale-meta",
        "dictionary", "translation"])
def test_summary_takes_each_size_from_a_flag_the_tokenized_data_or_params_yaml_and_says_which(
        in_empty_dir, capsys, files, argv, first, expected):
    for name, text in files.items():
        (_params if name.endswith("params.yaml") else _write)(in_empty_dir / name, text)
    main(["summary", *(arg.format(root=in_empty_dir) for arg in argv)])
    out = capsys.readouterr().out
    expected = [text.format(root=in_empty_dir) for text in expected]
    assert out.splitlines()[0] == first and all(text in out for text in expected), out
    assert ("assumed" in out) == any("assumed" in text for text in expected), out  # only where no data gives C


def test_summary_takes_V_from_an_existing_sentencepiece_model_params_yaml_names(classifier_files, capsys):
    _params(Path("params.yaml"), "tokenizer:\n  vocab_size: 4000\n  model_file: data/tokenized/spm.model\n")
    main(["summary"])  # no data/tokenized/meta.json: V from the model's pieces, not tokenizer.vocab_size
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("V=40 ")
    assert "V from tokenizer.model_file (data/tokenized/spm.model) in params.yaml" in out


@pytest.mark.parametrize("params, argv, message", [
    ("", [], r"^error: no params.yaml here to read the model from: .* or give --vocab-size$"),
    ("", ["--params", "elsewhere.yaml"], "elsewhere.yaml.*not found"),
    ("model:\n  n_layer: 3\n", [], "model.n_layer"),
    ("", ["--vocab-file", "nothing.txt"], r"nothing\.txt: no such file \(--vocab-file\)"),
    ("", ["--vocab-size", "9", "--n-layers", "1", "--d-ff", "8", "--d-model", "7", "--n-heads", "2"],
     r"^error: model.d_model \(7\) must be divisible by model.n_heads \(2\) \(D from --d-model, A from --n-heads\)$"),
    ("", ["--vocab-size", "9", "--n-layers", "1", "--d-ff", "8", "--d-model", "9", "--n-heads", "3"],
     r"must be even .* \(D from --d-model, A from --n-heads\)"),
])
def test_summary_refuses_in_one_line_naming_what_is_missing_or_wrong_and_where_it_came_from(
        in_empty_dir, params, argv, message):
    """No defaults in the code: outside the project the flags describe the model, or the message says what to give."""
    if params:
        _params(in_empty_dir / "params.yaml", params)
    with pytest.raises(SystemExit, match=message):
        main(["summary", *argv])


BAD_GENERATE = [("--temperature", "-1"), ("--temperature", "-0.1"), ("--tokens", "0"), ("--top-k", "-1"),
                ("--samples", "0"), ("--tokens", "many")]
NOT_UTF8 = [["predict", "caf\udce9 good"], ["generate", "caf\udce9"], ["fill", "caf\udce9 <mask>"],
            ["translate", "caf\udce9"]]  # Python hands undecodable argument bytes over as lone surrogates


@pytest.mark.parametrize("argv, said", [
    *(([*command, "--checkpoint", "nothing.pt"], ["is not UTF-8 (byte 0xe9 at character 4): convert it to UTF-8"])
      for command in NOT_UTF8),
    *((["generate", "hello", option, value, "--checkpoint", "nothing.pt"], [f"argument {option}", value])
      for option, value in BAD_GENERATE),
    (["summary", "--vocab-size", "100", "--vocab-file", "dict.txt"], ["not allowed with"]),
])
def test_impossible_settings_are_usage_errors_before_loading_anything(argv, said, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2  # argparse's usage error, not the missing checkpoint
    err = capsys.readouterr().err
    assert all(text in err for text in said), err


def test_generate_accepts_the_boundaries():
    args = build_parser().parse_args(["generate", "--temperature", "0", "--top-k", "0", "--tokens", "1",
                                      "--samples", "1"])
    assert (args.temperature, args.top_k, args.tokens, args.samples) == (0.0, 0, 1, 1)


class Terminal(io.StringIO):
    """Standard input attached to a terminal: reading it would wait for the user."""

    isatty = lambda self: True  # noqa: E731
    read = readline = readlines = __iter__ = __next__ = lambda self, *args: pytest.fail("read the terminal")


def _piped(data: bytes) -> io.TextIOWrapper:
    return io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="surrogateescape")


@pytest.mark.parametrize("argv, stdin, problem", [
    (["predict"], Terminal(), r'^error: no texts to classify: pass them as arguments \(lmtransfer predict ".*stand'),
    (["predict"], io.StringIO("\n   \n\n"), "standard input held no text"),
    (["predict", ""], None, "the text is empty"),
    (["predict", "   "], None, "the text is empty"),
    (["predict", "a fine film", "\t "], None, "text 2 of 2 is empty"),
    (["translate", "  "], None, "nothing to translate"),
    (["predict"], _piped(b"nice film\ncaf\xe9 good\n"), r"line 2 of standard input is not UTF-8 \(byte 0xe9 at byte 4"),
], ids=["terminal", "blank-lines", "empty", "spaces", "second-empty", "translate", "not-utf8"])
def test_no_text_or_an_empty_one_is_refused_before_loading_a_model(argv, stdin, problem, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", stdin or Terminal())
    with pytest.raises(SystemExit, match=problem):
        main([*argv, "--checkpoint", "nothing.pt"])
    assert capsys.readouterr().out == ""


WORDS = "the a film movie was is good bad great dull moving long short story actor plot".split()


@pytest.fixture
def classifier_files(in_empty_dir):
    """A tiny untrained classifier and its tokenizer, laid out as the pipeline writes them."""
    corpus = _write(in_empty_dir / "corpus.txt",
                    "\n".join(" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(8)) for i in range(200)))
    tokenizer = SentencePieceTokenizer(train_sentencepiece(corpus, shipped("tokenizer", vocab_size=40)))
    tokenized = in_empty_dir / "data/tokenized"
    tokenized.mkdir(parents=True)
    save_tokenizer(tokenizer, tokenized)
    config = ModelConfig(tokenizer.vocab_size, d_model=8, n_layers=1, n_heads=2, d_ff=16, dropout=0.0)
    torch.manual_seed(0)
    checkpoint = in_empty_dir / "classifier.pt"
    save_checkpoint(checkpoint, Classifier(config, 2, "mean"), "classifier", config, n_classes=2, pooling="mean",
                    label_names=["neg", "pos"], max_len=16, tokenizer_sha256=tokenizer_fingerprint(tokenized))
    return checkpoint


def _predictions(out: str) -> list[tuple[str, float, str]]:
    return [(label, float(p), text) for label, p, text in (row.split("\t") for row in out.splitlines())]


def test_predict_labels_argument_texts_and_piped_lines_alike(classifier_files, monkeypatch, capsys):
    main(["predict", "a good film", "dull and long", "--checkpoint", str(classifier_files)])
    from_arguments = _predictions(capsys.readouterr().out)
    assert [text for _, _, text in from_arguments] == ["a good film", "dull and long"]
    assert all(label in ("neg", "pos") and 0.5 <= probability <= 1 for label, probability, _ in from_arguments)
    monkeypatch.setattr(sys, "stdin", io.StringIO("a good film\n\n   \ndull and long\r\n"))
    main(["predict", "--checkpoint", str(classifier_files)])
    assert _predictions(capsys.readouterr().out) == from_arguments  # blank lines skipped, line ends dropped
    monkeypatch.setattr(sys, "stdin", _piped(b"\xef\xbb\xbfa good film\r\n"))  # UTF-8 with a byte order mark
    main(["predict", "--checkpoint", str(classifier_files)])
    assert _predictions(capsys.readouterr().out) == from_arguments[:1]


def test_a_model_is_never_used_with_a_tokenizer_it_was_not_trained_with(classifier_files, in_empty_dir):
    retrained = SentencePieceTokenizer(train_sentencepiece(in_empty_dir / "corpus.txt",
                                                           shipped("tokenizer", vocab_size=42)))
    save_tokenizer(retrained, in_empty_dir / "data/tokenized")  # tokenize ran again with another vocab_size
    with pytest.raises(SystemExit) as exit_:
        main(["predict", "awful boring film", "--checkpoint", str(classifier_files)])
    assert str(exit_.value).startswith(f"error: {classifier_files} was trained with another tokenizer than the one "
                                       "in data/tokenized (sha256 ")
    payload = torch.load(classifier_files, weights_only=True)
    del payload["tokenizer_sha256"]  # a checkpoint from elsewhere: only the id range can be checked
    torch.save(payload, classifier_files)
    with pytest.raises(SystemExit, match=r"knows 40 ids but the tokenizer in data/tokenized gives 42"):
        main(["predict", "awful boring film", "--checkpoint", str(classifier_files)])


@pytest.mark.parametrize("command, said", [
    (["translate", "the cat sleeps"], "(run the stage that produces it: `make run-translation`, or `dvc repro "
                                      "translation/dvc.yaml`)"),
    (["predict", "a fine film"], "(run the stage that produces it: `make run`, or `dvc repro`)"),
    (["generate", "hello"], "(run the stage that produces it: `make run`, or `dvc repro`)"),
    (["scaling", "--pretraining-spread", "missing.json", "--root", "."], "--pretraining-spread missing.json: no such "
                                                                         "file; give the evaluate"),  # as given
    (["params", "--check", "params.yaml"], "params.yaml: parameter file not found; the pipeline reads its parameters "
                                           "there: restore it (git checkout -- params.yaml) or write one"),
])
def test_a_missing_file_is_named_with_what_makes_or_restores_it(in_empty_dir, command, said):
    _write(in_empty_dir / "dvc.yaml", "stages: {}\n")
    _write(in_empty_dir / "translation/dvc.yaml", "stages: {}\n")
    with pytest.raises(SystemExit) as exit_:
        main(command)
    assert str(exit_.value).startswith("error: ") and said in str(exit_.value), exit_.value


@pytest.mark.parametrize("content, problem", [
    ('{"gap": {"accuracy_mean": 0.01, "ci95_low": -0.', "not valid JSON (line 1 column"),  # cut short
    ("{}", "without what this command reads (KeyError: 'pretraining')"),  # valid JSON, not a report
    (b"\xff\xfe{}", "cannot be read"),  # not UTF-8
])
def test_results_names_a_damaged_result_file(content, problem):
    """`metrics/evaluate.json` cut short gave `error: Expecting ',' delimiter: ...`, naming no file (issue 71)."""
    path = Path("metrics/evaluate.json")
    path.parent.mkdir()
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(SystemExit) as stopped:
        main(["results"])
    message = str(stopped.value)
    assert message.startswith("error: metrics/evaluate.json: evaluation metrics, ") and problem in message, message
    assert "git checkout -- metrics/evaluate.json" in message and "\n" not in message


@pytest.mark.parametrize("change, problem", [("nokey=1", "nokey=1: not `section.key=value`"),
                                             ("finetune.nokey=1", "finetune.nokey is not a key of params.yaml")])
def test_course_checks_its_set_changes_before_fetching_any_file(change, problem, monkeypatch):
    """Without the course's files, a bad key failed on the download, not on the key (issue 71)."""
    from lmtransfer.course import files

    monkeypatch.setattr(files, "gather", lambda *args, **kwargs: pytest.fail("fetched the files before checking --set"))
    for name in ("params.yaml", "profiles/course.yaml"):
        _write(Path(name), (REPO / name).read_text(encoding="utf-8"))
    with pytest.raises(SystemExit) as stopped:
        main(["course", "--set", change])
    assert problem in str(stopped.value)
