"""Fixtures shared by the test modules."""

from __future__ import annotations

import pytest
from sample_keys import ALL_KEYS

from statekernel.lowlevel import KeyRegistry, LiveState


@pytest.fixture
def registry() -> KeyRegistry:
    return KeyRegistry.of(*ALL_KEYS)


@pytest.fixture
def state(registry: KeyRegistry) -> LiveState:
    return LiveState(registry)
