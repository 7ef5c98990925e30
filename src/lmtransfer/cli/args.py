"""What the `lmtransfer` commands share: checked number types, texts from arguments or standard input, the help
layout."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

CONVERT_HINT = "convert it to UTF-8 first (e.g. iconv -f latin1 -t utf-8)"
TOKENIZER_HELP = "the tokenized data directory (or a file in it)"


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions kept as written; each option's default added to its help once (not where the help already
    says its default, nor for a default that says nothing)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if ("default" in text or action.default in (None, "", False, argparse.SUPPRESS) or not action.option_strings
                or isinstance(action, (argparse._HelpAction, argparse._VersionAction))):
            return text
        return f"{text} (default: %(default)s)"


def command(commands: argparse._SubParsersAction, name: str, help: str, description: str = "",
            ) -> argparse.ArgumentParser:
    """A subcommand whose description is its help unless given."""
    return commands.add_parser(name, help=help, description=description or help, formatter_class=HelpFormatter)


def bounded(kind: type, low: float, name: str):
    """An argparse type: `kind` values >= low."""

    def convert(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {name}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {text}")
        return value

    return convert


POSITIVE = bounded(int, 1, "an integer")
NON_NEGATIVE = bounded(int, 0, "an integer")
NON_NEGATIVE_FLOAT = bounded(float, 0, "a number")


def utf8_text(text: str) -> str:
    """An argparse type: arguments that are not UTF-8 reach Python as lone surrogates; refused, naming the byte."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        byte = text[error.start].encode("utf-8", "surrogateescape")[0]
        shown = text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        raise argparse.ArgumentTypeError(f"{shown!r} is not UTF-8 (byte 0x{byte:02x} at character {error.start + 1}): "
                                         f"{CONVERT_HINT}") from None
    return text


def add_texts(parser: argparse.ArgumentParser, metavar: str, what: str) -> None:
    parser.add_argument("texts", nargs="*", default=argparse.SUPPRESS, metavar=metavar, type=utf8_text,
                        help=f"{what} (default: the lines of standard input)")


def add_model_files(parser: argparse.ArgumentParser, checkpoint: Path, checkpoint_help: str, tokenizer: Path,
                    tokenizer_help: str = TOKENIZER_HELP) -> None:
    parser.add_argument("--checkpoint", type=Path, default=checkpoint, help=checkpoint_help)
    parser.add_argument("--tokenizer", type=Path, default=tokenizer, help=tokenizer_help)


def texts_from_arguments_or_stdin(args: argparse.Namespace, verb: str, command: str, example: str,
                                  file: str) -> list[str]:
    """The texts of the command line, else the lines of piped standard input (blank ones skipped). Checked before
    any model loads: an empty text or a terminal waiting for input is a usage error."""
    arguments = getattr(args, "texts", [])
    how = (f'pass them as arguments (lmtransfer {command} "{example}") or one per line on standard input '
           f"(lmtransfer {command} < {file})")
    for number, text in enumerate(arguments, start=1):
        if not text.strip():
            which = f"text {number} of {len(arguments)}" if len(arguments) > 1 else "the text"
            raise SystemExit(f"error: {which} is empty: there is nothing to {verb} in {text!r}")
    if arguments:
        return arguments
    if sys.stdin is None or sys.stdin.isatty():
        raise SystemExit(f"error: no texts to {verb}: {how}")
    texts = [line.rstrip("\r\n") for line in _stdin_lines() if line.strip()]
    if not texts:
        raise SystemExit(f"error: standard input held no text (only blank lines or nothing): {how}")
    return texts


def _stdin_lines():
    """Standard input decoded as UTF-8 here (not by the locale): a line that is not stops with its number."""
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:  # a text-only stream (a test, an embedding program)
        yield from sys.stdin
        return
    for number, raw in enumerate(stream, start=1):
        try:
            yield raw.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError as error:
            raise SystemExit(f"error: line {number} of standard input is not UTF-8 (byte 0x{raw[error.start]:02x} at "
                             f"byte {error.start + 1}): {CONVERT_HINT}") from None
