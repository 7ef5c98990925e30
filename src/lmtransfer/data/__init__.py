"""What both tasks' data preparation shares: readers of text files in their encodings, pinned and checksummed
downloads, and the prepared format the tokenize stage reads. Each task's own sources live in its `data/`."""
