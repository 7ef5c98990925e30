"""What both tasks' data preparation shares: file readers, pinned downloads, the prepared format."""
