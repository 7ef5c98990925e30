"""What every stage of both pipelines uses: the typed params, the file layout (`paths`), atomic file I/O, and the
share of the cores a process takes. Nothing else lives here, so every stage lists this folder as one DVC dependency."""
