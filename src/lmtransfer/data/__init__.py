"""Data sources (where raw text comes from) and preparation (clean, dedupe, split)."""
