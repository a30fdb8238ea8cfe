"""The HTTP server: a FastAPI app over one scheduler (continuous batching), and the web page it serves."""
