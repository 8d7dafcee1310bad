// The order pipeline in Azure: Function App (Flex Consumption) with a user-assigned identity,
// Storage (tables, queues, deployment package), Service Bus (orders), monitoring and alerts.
// No keys anywhere: every connection is identity-based.
targetScope = 'subscription'

@minLength(1)
@maxLength(64)
@description('Name of the environment (azd); used to name the resource group and make names unique.')
param environmentName string

@minLength(1)
@description('Region for every resource; it must offer the Flex Consumption plan.')
@metadata({ azd: { type: 'location' } })
param location string

@description('Object id of the deploying user (azd sets it), granted send and read access for the CLI; empty to skip.')
param principalId string = ''

@allowed(['User', 'Group', 'ServicePrincipal'])
param principalType string = 'User'

@description('E-mail address for operator alerts; empty for none.')
param alertEmail string = ''

@description('The remote services the Agents call. real: the three URLs below. demo: simulated services served by the app itself (function key) and injecting faults; for a demo deployment only, never for real orders.')
@allowed(['real', 'demo'])
param remoteServices string = 'real'

@secure()
// checkov:skip=CKV_AZURE_131:The default is newGuid(), a fresh value made at each deployment, not a value written here.
@description('demo only: the function key the Agents present to the simulated services. A new one each deployment unless you give one.')
param simulatorKey string = newGuid()

@description('Client id of the Entra ID app registration operators sign in to, with the app roles Orders.Read, Orders.Resubmit, Orders.Cancel and Orders.Pause (docs/security-operators.md); empty: sign-in is off and the operator API answers no one.')
param operatorAuthClientId string = ''

@description('The Entra ID tenant of that app registration (default: this subscription\'s).')
param operatorAuthTenantId string = tenant().tenantId

@description('Client ids of the applications an operator\'s token may come from besides the app registration itself (the console\'s sign-in): by default the Azure CLI\'s, whose token `orders --api` sends (az account get-access-token). A token any other application got for the API is refused.')
param operatorClientApps array = ['04b07795-8ddb-461a-bbee-02f9e1bf7b46']

@description('Each real remote service\'s settings by name (remoteServices=real): the URL of each HTTP service (urlSettings in services.json) and the settings each code service declares (codeSettings), a secret as a Key Vault reference (@Microsoft.KeyVault(SecretUri=...)); the app will not start without every one.')
param serviceUrls object = {}

@description('Senders kept apart (docs/security.md, Senders): each {name, principalId, principalType}, the name a lower-case letter then up to 19 lower-case letters or digits. Each sends on the Service Bus queue orders-<name> and reads status-<name>; empty: one default sender on the orders queue.')
param senders array = []

@description('Whether storage and Service Bus take traffic from the internet (every request still needs Entra ID and an RBAC role). Enabled for the quickstart. Disabled: only through private endpoints, which you add with a virtual network (appSubnetId; docs/deploying.md), and Service Bus is Premium, the only tier with private endpoints.')
@allowed(['Enabled', 'Disabled'])
param publicNetworkAccess string = 'Enabled'

@description('With publicNetworkAccess=Disabled: the resource id of the subnet the app\'s outbound traffic goes through (virtual network integration, delegated to Microsoft.App/environments), in the virtual network that holds the private endpoints of storage and Service Bus. Empty: none.')
param appSubnetId string = ''

@description('Send storage request logs to Log Analytics too: one record per table or queue transaction, billed as ingestion.')
param storageRequestLogs bool = false

// The newest Python the Flex Consumption plan runs as GA; 3.10 reached its end of life in October
// 2026. The app's unit and model tests run on 3.13 as well as 3.11 (make test).
@allowed(['3.11', '3.12', '3.13'])
param pythonVersion string = '3.13'

@description('The most instances the app may scale out to (Flex Consumption allows 1 to 1000).')
@minValue(1)
@maxValue(1000)
param maximumInstanceCount int = 40

@description('HTTP invocations one instance runs at once; the thread pool below is sized with it.')
@minValue(1)
@maxValue(1000)
param httpPerInstanceConcurrency int = 16

@allowed([512, 2048, 4096])
param instanceMemoryMB int = 2048

var resourceToken = toLower(uniqueString(subscription().id, environmentName, location))
var tags = { 'azd-env-name': environmentName }
var prefix = 'orders-${resourceToken}'
var functionAppName = 'func-${prefix}'
var deploymentContainerName = 'app-package-${take(resourceToken, 8)}'

// Names the code binds to (function_app.py) or reads (shared/settings.py). tests/infra holds
// this file and the code to the same names.
var queues = {
  scheduler: 'scheduler-commands'
  responses: 'agent-responses'
}
// The services the workflows call (written by `python -m shared.contracts` from the registry):
// each one's request queue and the setting that names it.
var services = loadJsonContent('services.json')
var tables = {
  state: 'OrderState'
  inFlight: 'OrdersInFlight'
  rejected: 'RejectedOrders'
  alerts: 'OperatorAlerts'
  simulator: 'SimulatedEffects'
}
var ordersQueueName = 'orders'
var senderNames = [for s in senders: s.name]
var statusQueueNames = [for s in senders: 'status-${s.name}']
// The storage queues the app triggers on or sends to (each with its -poison queue).
var appQueueNames = concat([queues.scheduler, queues.responses], services.queues)
// Prefixes of the queues an order's reply_to may name (ReplyQueueAllowList); the app's identity
// may put messages on queues so named and no other queue outside its own (app/rbac.bicep).
var replyQueuePrefixes = ['order-status-']
var tableNames = [tables.state, tables.inFlight, tables.rejected, tables.alerts, tables.simulator]

var appSettings = union(services.queueSettings, {
  // The Python worker runs every synchronous function on one pool of this many threads, and an
  // Agent holds its thread for up to a step's budget while a service hangs. Sized from the
  // registry and host.json so that no invocation ever waits for a thread even with every
  // function on one instance (shared/contracts/services.py thread_pool; tests/infra/
  // test_thread_pool.py): a service added to a workflow adds its share.
  PYTHON_THREADPOOL_THREAD_COUNT: services.threadPool
  OrdersQueueName: ordersQueueName
  SchedulerQueueName: queues.scheduler
  AgentResponsesQueueName: queues.responses
  StateTableName: tables.state
  InFlightTableName: tables.inFlight
  RejectedOrdersTableName: tables.rejected
  OperatorAlertsTableName: tables.alerts
  SimulatorTableName: tables.simulator
  SupervisorSchedule: '*/30 * * * * *'
  // Longer than this between two completed ticks is an outage (2.5 x the interval): the steps
  // due in it are sent again without counting a failure.
  OutageGapSeconds: '75'
  SupervisorMaxRecoveriesPerTick: '200'
  FailureThreshold: '3'
  CompensationFailureThreshold: '10'
  RescueThreshold: '5'
  RetryBackoffSeconds: '5'
  RetryBackoffMaxSeconds: '300'
  PendingGraceSeconds: '60'
  StepBudgetSeconds: ''
  ReplyQueueAllowList: join(replyQueuePrefixes, ',')
  Senders: join(senderNames, ',')
  // The share of fault-free orders whose whole trace is exported; orders in trouble are kept
  // whatever it says. '1' for full fidelity (docs/tracing.md).
  OrderTraceSampleRatio: '0.05'
  RejectedRetentionDays: '30'
  AlertRetentionDays: '90'
  AgentRetryBaseSeconds: '0.2'
  AgentRetryMaxSeconds: '5'
  AgentCallTimeoutSeconds: '10'
  CircuitBreakerFailures: '5'
  CircuitBreakerResetSeconds: '30'
  CircuitBreakerWindowSeconds: '20'
  SimLatencyMs: '50'
  SimTransientErrorRate: '0.1'
  SimPermanentErrorRate: '0.02'
  SimHangRate: '0.01'
  SimHangSeconds: '120'
})

resource rg 'Microsoft.Resources/resourceGroups@2024-11-01' = {
  name: 'rg-${environmentName}'
  location: location
  tags: tags
}

module identity 'app/identity.bicep' = {
  name: 'identity'
  scope: rg
  params: {
    name: 'id-${prefix}'
    location: location
    tags: tags
  }
}

module storage 'app/storage.bicep' = {
  name: 'storage'
  scope: rg
  params: {
    name: 'st${resourceToken}'
    location: location
    tags: tags
    deploymentContainerName: deploymentContainerName
    queueNames: appQueueNames
    statusQueueNames: statusQueueNames
    tableNames: tableNames
    publicNetworkAccess: publicNetworkAccess
  }
}

module serviceBus 'app/servicebus.bicep' = {
  name: 'servicebus'
  scope: rg
  params: {
    name: 'sb-${prefix}'
    location: location
    tags: tags
    ordersQueueName: ordersQueueName
    senderNames: senderNames
    publicNetworkAccess: publicNetworkAccess
  }
}

module monitoring 'app/monitoring.bicep' = {
  name: 'monitoring'
  scope: rg
  params: {
    logAnalyticsName: 'log-${prefix}'
    applicationInsightsName: 'appi-${prefix}'
    location: location
    tags: tags
  }
}

module rbac 'app/rbac.bicep' = {
  name: 'rbac'
  scope: rg
  params: {
    storageAccountName: storage.outputs.name
    queueNames: appQueueNames
    tableNames: tableNames
    replyQueuePrefixes: replyQueuePrefixes
    serviceBusNamespaceName: serviceBus.outputs.name
    ordersQueueName: serviceBus.outputs.ordersQueueName
    applicationInsightsName: monitoring.outputs.applicationInsightsName
    appPrincipalId: identity.outputs.principalId
    userPrincipalId: principalId
    userPrincipalType: principalType
  }
}

module senderRoles 'app/senders.bicep' = {
  name: 'senders'
  scope: rg
  params: {
    storageAccountName: storage.outputs.name
    serviceBusNamespaceName: serviceBus.outputs.name
    senders: senders
    appPrincipalId: identity.outputs.principalId
  }
}

module function 'app/function.bicep' = {
  name: 'function'
  scope: rg
  dependsOn: [rbac, senderRoles]
  params: {
    name: functionAppName
    planName: 'plan-${prefix}'
    location: location
    tags: tags
    identityId: identity.outputs.id
    identityClientId: identity.outputs.clientId
    storageAccountName: storage.outputs.name
    deploymentContainerUrl: '${storage.outputs.blobEndpoint}${deploymentContainerName}'
    serviceBusNamespace: serviceBus.outputs.fullyQualifiedNamespace
    applicationInsightsConnectionString: monitoring.outputs.connectionString
    pythonVersion: pythonVersion
    maximumInstanceCount: maximumInstanceCount
    instanceMemoryMB: instanceMemoryMB
    httpPerInstanceConcurrency: httpPerInstanceConcurrency
    appSettings: appSettings
    remoteServices: remoteServices
    simulatorKey: simulatorKey
    serviceUrls: serviceUrls
    operatorAuthClientId: operatorAuthClientId
    operatorAuthTenantId: operatorAuthTenantId
    operatorClientApps: operatorClientApps
    appSubnetId: appSubnetId
  }
}

module diagnostics 'app/diagnostics.bicep' = {
  name: 'diagnostics'
  scope: rg
  params: {
    logAnalyticsId: monitoring.outputs.logAnalyticsId
    storageAccountName: storage.outputs.name
    serviceBusNamespaceName: serviceBus.outputs.name
    functionAppName: function.outputs.name
    storageRequestLogs: storageRequestLogs
  }
}

module alerts 'app/alerts.bicep' = {
  name: 'alerts'
  scope: rg
  params: {
    namePrefix: prefix
    tags: tags
    location: location
    applicationInsightsId: monitoring.outputs.applicationInsightsId
    serviceBusNamespaceId: serviceBus.outputs.id
    ordersQueueName: ordersQueueName
    senderNames: senderNames
    alertEmail: alertEmail
  }
}

output AZURE_LOCATION string = location
output AZURE_TENANT_ID string = tenant().tenantId
output AZURE_RESOURCE_GROUP string = rg.name
output AZURE_FUNCTION_APP_NAME string = function.outputs.name
output SERVICE_API_NAME string = function.outputs.name
output FUNCTION_APP_URL string = 'https://${function.outputs.defaultHostName}'
output SERVICEBUS_NAMESPACE string = serviceBus.outputs.fullyQualifiedNamespace
output SERVICEBUS_QUEUE string = serviceBus.outputs.ordersQueueName
output AZURE_STORAGE_ACCOUNT string = storage.outputs.name
output AZURE_STORAGE_QUEUE_ENDPOINT string = storage.outputs.queueEndpoint
output AZURE_STORAGE_TABLE_ENDPOINT string = storage.outputs.tableEndpoint
output APPLICATIONINSIGHTS_NAME string = monitoring.outputs.applicationInsightsName
