"""Pictures of what happens inside: attention per head, positional encodings, tensor shapes."""
