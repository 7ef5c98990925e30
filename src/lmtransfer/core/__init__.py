"""Shared by both tasks: the model, tokenizer, params, data formats, runtime and checkpoints."""
