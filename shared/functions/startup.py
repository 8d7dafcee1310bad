"""What the app does once, as the worker imports it: settings checked, logging and tracing set."""

from __future__ import annotations

import logging

from shared import bootstrap, tracing
from shared.settings import Settings, load_settings

# The Python worker sets the root logger to INFO and forwards every record to the host, where
# Application Insights ingests (and bills) it; at INFO the Azure SDK logs every HTTP request and
# response, dozens per order, and httpx one record per remote-service call. Their warnings and
# errors still go through.
QUIET_LOGGERS = ("azure", "httpx", "httpcore")


def start() -> Settings:
    """Fail at start-up, naming the setting, rather than on the first message; quieten the
    SDKs' logs; set up tracing from the standard OpenTelemetry variables (nothing when none is
    set)."""
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    settings = load_settings()
    settings.registry(bootstrap.configured())
    tracing.configure(sample_ratio=settings.trace_sample_ratio)
    return settings
