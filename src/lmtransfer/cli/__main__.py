"""`python -m lmtransfer.cli`: the same as the `lmtransfer` command."""

from lmtransfer.cli.main import main

main()
