"""The HTTP server: a FastAPI app with dynamic batching, and the web page it serves (SPEC section 4)."""
