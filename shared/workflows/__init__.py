"""The workflows this app runs: the registry handed to the composition root (function_app.py).

Add a workflow (or a new version of one) here; the engine never imports this package. Every
service a registered workflow calls gets its Agent function, queue, settings and Bicep
resources from this list (docs/adapting.md).
"""

from __future__ import annotations

from shared.domain.workflow import Registry
from shared.workflows.digital import DIGITAL_DELIVERY
from shared.workflows.orders import ORDER_FULFILMENT

# An order that names no workflow follows the default (and so does every record written
# before records named theirs).
REGISTRY = Registry.of([ORDER_FULFILMENT, DIGITAL_DELIVERY], default=ORDER_FULFILMENT.name)
