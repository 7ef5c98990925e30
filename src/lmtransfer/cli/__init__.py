"""The `lmtransfer` command: main.py builds the parser; models.py runs trained models; experiments.py the rest."""
