"""Text to ids and back: the tokenizer, the tokenize stage's encoding, the stored id arrays, the training batches."""
