"""Integration tests against the embedded stack."""
