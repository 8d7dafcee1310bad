"""What the app does once, as the worker imports it: settings checked, logging and tracing set."""

from __future__ import annotations

import logging

from shared import bootstrap, tracing
from shared.configuration import Configuration, resolve
from shared.settings import load_settings

# The Python worker sets the root logger to INFO and forwards every record to the host, where
# Application Insights ingests (and bills) it; at INFO the Azure SDK logs every HTTP request and
# response, dozens per order, and httpx one record per remote-service call. Their warnings and
# errors still go through.
QUIET_LOGGERS = ("azure", "httpx", "httpcore")


def start() -> Configuration:
    """The settings read and resolved with the workflows, once: a wrong or missing one fails
    the start, naming it, rather than the first message. The SDKs' logs quietened; tracing set
    up from the standard OpenTelemetry variables (nothing when none is set)."""
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    config = resolve(load_settings(), bootstrap.configured())
    bootstrap.use(config)
    tracing.configure(sample_ratio=config.settings.trace_sample_ratio)
    return config
