"""The front door: the functions the host indexes, each a trigger, its bindings and one call into
the package (shared/blueprints.py), for the workflows this app runs (shared/workflows).

Names of queues, tables and connections come from app settings (docs/settings.md).
"""

import azure.functions as func

from shared import blueprints, bootstrap, entrypoints
from shared.workflows import REGISTRY

bootstrap.configure(REGISTRY)
settings = entrypoints.check_settings()

app = func.FunctionApp()
# Intake, the Scheduler's queues, the Supervisor's timer: the pattern, whatever the workflows.
app.register_functions(blueprints.pipeline())
# One Agent per service the workflows call.
app.register_functions(blueprints.agents(REGISTRY.services))
app.register_functions(blueprints.operator_api())
# Fault-injecting services are indexed only where asked for: local runs and demo deployments.
if settings.simulators_enabled:
    app.register_functions(blueprints.simulators())
