"""The upgrade tests run on the integration tests' pipeline against Azurite."""

from tests.integration.conftest import make_pipeline, pipeline  # noqa: F401
