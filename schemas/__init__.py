"""Pydantic models used end to end: API resources, topic records, errors, settings."""
