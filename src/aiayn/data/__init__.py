"""Data: synthetic tasks, corpora readers and batching."""
