// Role assignments, least privilege: each storage role on the queues and tables the app uses,
// one by one, where Azure allows it (docs/security.md, "What the app's identity can reach").
// Role ids are Azure built-in role definitions.

param storageAccountName string
@description('The storage queues the app reads or writes (each has a <name>-poison queue, also covered).')
param queueNames array
@description('The tables the app reads and writes.')
param tableNames array
@description('Prefixes of the queues an order\'s reply_to may name (ReplyQueueAllowList): the app may put messages on queues so named; empty: on none.')
param replyQueuePrefixes array
param serviceBusNamespaceName string
param ordersQueueName string
param applicationInsightsName string
param appPrincipalId string
@description('The deploying user or group, so the CLI works against the cloud; empty to skip.')
param userPrincipalId string = ''
@allowed(['User', 'Group', 'ServicePrincipal'])
param userPrincipalType string = 'User'

var roles = {
  storageBlobDataOwner: 'b7e6dc6d-f1e8-4753-8033-0f276bb0955b'
  storageQueueDataContributor: '974c5e8b-45b9-4653-ba55-5f855dd0fb88'
  storageTableDataContributor: '0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3'
  storageQueueDataReader: '19e7f393-937e-4f77-808e-94535e297925'
  storageQueueDataMessageSender: 'c6a89b2d-59bc-44d0-9896-0f6e12d7b80a'
  storageTableDataReader: '76199698-9eea-4c19-bc75-cec21354c6b6'
  serviceBusDataOwner: '090c5cfd-751d-490a-894a-3ce6f1109419'
  serviceBusDataSender: '69a216fc-b8fb-44d8-bc22-1f3c2cd27a39'
  monitoringMetricsPublisher: '3913510d-42f4-4e42-8a64-420c390055eb'
}

resource storage 'Microsoft.Storage/storageAccounts@2023-05-01' existing = {
  name: storageAccountName
}

resource queueService 'Microsoft.Storage/storageAccounts/queueServices@2023-05-01' existing = {
  parent: storage
  name: 'default'
}

resource tableService 'Microsoft.Storage/storageAccounts/tableServices@2023-05-01' existing = {
  parent: storage
  name: 'default'
}

// The storage module creates them all before this module runs (it reads its outputs).
resource queues 'Microsoft.Storage/storageAccounts/queueServices/queues@2023-05-01' existing = [
  for q in queueNames: {
    parent: queueService
    name: q
  }
]

resource poisonQueues 'Microsoft.Storage/storageAccounts/queueServices/queues@2023-05-01' existing = [
  for q in queueNames: {
    parent: queueService
    name: '${q}-poison'
  }
]

resource tables 'Microsoft.Storage/storageAccounts/tableServices/tables@2023-05-01' existing = [
  for t in tableNames: {
    parent: tableService
    name: t
  }
]

resource namespace 'Microsoft.ServiceBus/namespaces@2026-01-01' existing = {
  name: serviceBusNamespaceName
}

resource ordersQueue 'Microsoft.ServiceBus/namespaces/queues@2026-01-01' existing = {
  parent: namespace
  name: ordersQueueName
}

resource applicationInsights 'Microsoft.Insights/components@2020-02-02' existing = {
  name: applicationInsightsName
}

// The Functions host's own storage (AzureWebJobsStorage): it keeps its leases, timer schedules
// and keys in blob containers it creates when it first needs them, and reads the deployment
// package from a container, so blob access is account-wide (creating a container is an
// account-level operation).
resource appBlobs 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(storage.id, appPrincipalId, roles.storageBlobDataOwner)
  scope: storage
  properties: {
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageBlobDataOwner)
  }
}

// Each queue the app triggers on or sends to: receive, delete, send, read its length (the scale
// controller and the health probe). The -poison queues: the host moves a message there after
// its last try, and the health probe reads their length.
resource appQueues 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for (q, i) in queueNames: {
    name: guid(queues[i].id, appPrincipalId, roles.storageQueueDataContributor)
    scope: queues[i]
    properties: {
      principalId: appPrincipalId
      principalType: 'ServicePrincipal'
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageQueueDataContributor)
    }
  }
]

resource appPoisonQueues 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for (q, i) in queueNames: {
    name: guid(poisonQueues[i].id, appPrincipalId, roles.storageQueueDataContributor)
    scope: poisonQueues[i]
    properties: {
      principalId: appPrincipalId
      principalType: 'ServicePrincipal'
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageQueueDataContributor)
    }
  }
]

resource appTables 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for (t, i) in tableNames: {
    name: guid(tables[i].id, appPrincipalId, roles.storageTableDataContributor)
    scope: tables[i]
    properties: {
      principalId: appPrincipalId
      principalType: 'ServicePrincipal'
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageTableDataContributor)
    }
  }
]

// Status updates go to the queue an order's reply_to names, chosen by the sender at run time
// under a ReplyQueueAllowList prefix: no queue exists to scope to at deployment. So the app may
// put messages (nothing else: no read, no delete) on queues whose name starts with one of those
// prefixes, an account-wide assignment narrowed by a condition on the queue's name.
var replyQueueNamed = [for p in replyQueuePrefixes: '@Resource[Microsoft.Storage/storageAccounts/queueServices/queues:name] StringStartsWith \'${p}\'']
var replyQueueNamedAny = join(replyQueueNamed, ' OR ')

resource appReplyQueues 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (!empty(replyQueuePrefixes)) {
  name: guid(storage.id, appPrincipalId, roles.storageQueueDataMessageSender)
  scope: storage
  properties: {
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageQueueDataMessageSender)
    description: 'Status updates to an order\'s reply_to queue, under a ReplyQueueAllowList prefix only.'
    conditionVersion: '2.0'
    condition: '((!(ActionMatches{\'Microsoft.Storage/storageAccounts/queueServices/queues/messages/add/action\'})) OR (${replyQueueNamedAny}))'
  }
}

// The intake trigger receives from the orders queue, and the scale controller reads its length
// to scale from zero, which needs Manage rights: Data Owner is the only built-in data role with
// them, so it is granted on that one queue, not on the namespace.
resource appServiceBus 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(ordersQueue.id, appPrincipalId, roles.serviceBusDataOwner)
  scope: ordersQueue
  properties: {
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.serviceBusDataOwner)
  }
}

resource appTelemetry 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(applicationInsights.id, appPrincipalId, roles.monitoringMetricsPublisher)
  scope: applicationInsights
  properties: {
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.monitoringMetricsPublisher)
  }
}

// The deploying user: send orders (Service Bus), read the app's queues' lengths and its tables
// (state, rejections, alerts), the same queues and tables one by one. Never a queued message:
// an Agent's request carries its attempt's token, which answers for the Agent (peeking is
// what the reader role would otherwise allow; nothing the CLI does needs it).
var userQueueNote = 'Queue lengths (orders health), never a message.'
var userQueueNoPeek = '((!(ActionMatches{\'Microsoft.Storage/storageAccounts/queueServices/queues/messages/read\'})))'
resource userQueues 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for (q, i) in (empty(userPrincipalId) ? [] : queueNames): {
    name: guid(queues[i].id, userPrincipalId, roles.storageQueueDataReader)
    scope: queues[i]
    properties: {
      principalId: userPrincipalId
      principalType: userPrincipalType
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageQueueDataReader)
      description: userQueueNote
      conditionVersion: '2.0'
      condition: userQueueNoPeek
    }
  }
]

resource userPoisonQueues 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for (q, i) in (empty(userPrincipalId) ? [] : queueNames): {
    name: guid(poisonQueues[i].id, userPrincipalId, roles.storageQueueDataReader)
    scope: poisonQueues[i]
    properties: {
      principalId: userPrincipalId
      principalType: userPrincipalType
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageQueueDataReader)
      description: userQueueNote
      conditionVersion: '2.0'
      condition: userQueueNoPeek
    }
  }
]

resource userTables 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for (t, i) in (empty(userPrincipalId) ? [] : tableNames): {
    name: guid(tables[i].id, userPrincipalId, roles.storageTableDataReader)
    scope: tables[i]
    properties: {
      principalId: userPrincipalId
      principalType: userPrincipalType
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageTableDataReader)
    }
  }
]

// Sending orders (orders send): the orders queue only, as for the app.
resource userServiceBus 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (!empty(userPrincipalId)) {
  name: guid(ordersQueue.id, userPrincipalId, roles.serviceBusDataSender)
  scope: ordersQueue
  properties: {
    principalId: userPrincipalId
    principalType: userPrincipalType
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.serviceBusDataSender)
  }
}
