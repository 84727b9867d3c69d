"""Fixtures the integration modules share."""

from __future__ import annotations

import assemblyai as aai
import pytest

from ops.stack import Stack


@pytest.fixture(scope="module")
def aai_key(stack: Stack) -> str:
    """A new account's key, one per module."""
    return stack.new_account()[1]


@pytest.fixture(scope="module")
def aai_transcriber(stack: Stack, aai_key: str) -> aai.Transcriber:
    """The ``assemblyai`` SDK pointed at the stack with ``aai_key``, through a client of its
    own (the SDK's global settings are left alone)."""
    return aai.Transcriber(client=aai.Client(settings=aai.Settings(
        api_key=aai_key, base_url=stack.url(""), http_timeout=60.0, polling_interval=1.0)))
