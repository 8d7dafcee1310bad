"""What the app knows of where it runs."""

from __future__ import annotations

from collections.abc import Mapping


def running_in_azure(environ: Mapping[str, str]) -> bool:
    """The platform sets these on every App Service / Functions instance; no local run does."""
    return bool(environ.get("WEBSITE_INSTANCE_ID") or environ.get("WEBSITE_SITE_NAME"))
