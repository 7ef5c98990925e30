"""The `lmtransfer` command (`main.py` builds the parser); each task's commands live in a module of their own:
`classification`, `translation`, and `pretraining` for the language model both tasks pretrain."""
