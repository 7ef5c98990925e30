"""The code that writes the docs' generated tables."""
