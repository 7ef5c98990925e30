"""What the `lmtransfer` commands share: the help layout and checked number types."""

from __future__ import annotations

import argparse


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
