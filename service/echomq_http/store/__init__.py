"""Redis: the backend seam, key names, script loading and calls, the multiplexer, the due index."""
