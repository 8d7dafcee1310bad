"""The front door: the functions the host indexes, by trigger family (shared/functions), for
the workflows this app runs (shared/workflows).

Names of queues, tables and connections come from app settings (docs/settings.md).
"""

import azure.functions as func

from shared import bootstrap
from shared.functions import agents, operator_api, pipeline, simulators, startup
from shared.workflows import REGISTRY

bootstrap.configure(REGISTRY)
config = startup.start()

app = func.FunctionApp()
# Intake (one per declared sender too), the Scheduler's queues, the Supervisor's timer: the
# pattern, whatever the workflows.
app.register_functions(pipeline.pipeline(config.senders))
# One Agent per service the workflows call.
app.register_functions(agents.agents(REGISTRY.services))
app.register_functions(operator_api.operator_api())
# Fault-injecting services are indexed only where asked for: local runs and demo deployments.
if config.settings.simulators_enabled:
    app.register_functions(simulators.simulators())
