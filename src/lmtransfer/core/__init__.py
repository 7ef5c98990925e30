"""What every stage of both pipelines uses: the typed params, the file layout (`paths`), atomic file I/O, the
errors and the LMTRANSFER_* variables. Nothing else lives here, so every stage lists this folder as one DVC dependency."""
