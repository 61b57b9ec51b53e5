"""The HTTP API: handlers by tag, their schemas, and the HTTP plumbing they share."""
