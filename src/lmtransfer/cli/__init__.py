"""The `lmtransfer` command: `main.py` builds the parser (and holds summary, params, results, report); `models.py`
the commands that run a trained model; `experiments.py` those that run or read several experiments."""
