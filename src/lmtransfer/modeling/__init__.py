"""The network both tasks share: the Transformer, its language-model loss, its checkpoints, the device it runs on."""
