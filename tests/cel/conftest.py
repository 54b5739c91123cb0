from __future__ import annotations

import pytest

from checkpoint.cel import get_engine


@pytest.fixture(params=["native", "python"])
def engine(request: pytest.FixtureRequest):
    return get_engine(request.param)
