"""The upgrade tests run on the integration tests' pipeline against Azurite, with the shipped
workflows: the records they read are those of the example's earlier releases."""

import pytest

from shared.domain.workflow import Registry
from shared.workflows import REGISTRY
from tests.integration.conftest import make_pipeline, pipeline  # noqa: F401


@pytest.fixture
def workflows() -> Registry:
    return REGISTRY
