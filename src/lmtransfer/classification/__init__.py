"""The classification task: its params, data sources, fine-tuning, evaluation and commands."""
