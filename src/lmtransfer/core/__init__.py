"""What every stage uses: typed params, file layout, atomic I/O, errors, LMTRANSFER_* variables."""
