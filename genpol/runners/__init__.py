"""Training loops and pipelines."""
