"""The translation task: its params, data, encoder-decoder, training, decoding and commands."""
