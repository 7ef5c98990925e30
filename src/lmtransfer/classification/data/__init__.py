"""Where classification's labeled data comes from, and how it is split."""
