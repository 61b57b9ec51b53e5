"""Fixtures of the client tests: the Python SDK against the session's service."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator

import pytest

from tests.clients.support import SDK_SRC

# This checkout's SDK, as subprocess_env gives child processes: not whichever one the environment
# has installed (a venv shared by several worktrees holds another checkout's).
sys.path.insert(0, str(SDK_SRC))

from echomq import AsyncClient, Client


@pytest.fixture
def sdk(service_url: str) -> Iterator[Client]:
    with Client(service_url) as client:
        yield client


@pytest.fixture
async def asdk(service_url: str) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(service_url) as client:
        yield client
