"""Where translation's sentence pairs come from, and how they are prepared."""
