"""The API contract as msgspec Structs: every request and response body (openapi/openapi.json),
one module per tag beside the tag's handlers, and what they share in common.py.

Payloads and results stay raw JSON (``msgspec.Raw``) from request to Redis and back: they are
validated as JSON once and never decoded into Python objects or encoded twice.
"""
