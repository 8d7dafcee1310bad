// The declared senders, kept apart (docs/security.md, Senders): each may send on its own orders
// queue and read its own status queue, and nothing else; the app receives from each orders
// queue and puts status on each status queue, and nothing else of theirs.

param storageAccountName string
param serviceBusNamespaceName string
@description('Each sender: {name, principalId, principalType (User, Group or ServicePrincipal; default ServicePrincipal)}.')
param senders array
param appPrincipalId string

var roles = {
  serviceBusDataOwner: '090c5cfd-751d-490a-894a-3ce6f1109419'
  serviceBusDataSender: '69a216fc-b8fb-44d8-bc22-1f3c2cd27a39'
  storageQueueDataMessageSender: 'c6a89b2d-59bc-44d0-9896-0f6e12d7b80a'
  storageQueueDataMessageProcessor: '8a0f0c08-91a1-4084-bc3d-661d67233fed'
}

resource storage 'Microsoft.Storage/storageAccounts@2023-05-01' existing = {
  name: storageAccountName
}

resource queueService 'Microsoft.Storage/storageAccounts/queueServices@2023-05-01' existing = {
  parent: storage
  name: 'default'
}

resource statusQueues 'Microsoft.Storage/storageAccounts/queueServices/queues@2023-05-01' existing = [
  for s in senders: {
    parent: queueService
    name: 'status-${s.name}'
  }
]

resource namespace 'Microsoft.ServiceBus/namespaces@2026-01-01' existing = {
  name: serviceBusNamespaceName
}

resource ordersQueues 'Microsoft.ServiceBus/namespaces/queues@2026-01-01' existing = [
  for s in senders: {
    parent: namespace
    name: 'orders-${s.name}'
  }
]

// The app's intake receives from each sender's queue; the scale controller reads its length,
// which needs Manage rights (as for the default orders queue).
resource appReceives 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for (s, i) in senders: {
    name: guid(ordersQueues[i].id, appPrincipalId, roles.serviceBusDataOwner)
    scope: ordersQueues[i]
    properties: {
      principalId: appPrincipalId
      principalType: 'ServicePrincipal'
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.serviceBusDataOwner)
    }
  }
]

// The app puts status updates on each sender's status queue: put only, nothing else.
resource appTells 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for (s, i) in senders: {
    name: guid(statusQueues[i].id, appPrincipalId, roles.storageQueueDataMessageSender)
    scope: statusQueues[i]
    properties: {
      principalId: appPrincipalId
      principalType: 'ServicePrincipal'
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageQueueDataMessageSender)
    }
  }
]

// A sender sends on its own orders queue only.
resource senderSends 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for (s, i) in senders: {
    name: guid(ordersQueues[i].id, s.principalId, roles.serviceBusDataSender)
    scope: ordersQueues[i]
    properties: {
      principalId: s.principalId
      principalType: s.?principalType ?? 'ServicePrincipal'
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.serviceBusDataSender)
    }
  }
]

// A sender reads (and deletes) its own status updates, and cannot put one there: whatever is on
// its status queue came from the app.
resource senderReads 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for (s, i) in senders: {
    name: guid(statusQueues[i].id, s.principalId, roles.storageQueueDataMessageProcessor)
    scope: statusQueues[i]
    properties: {
      principalId: s.principalId
      principalType: s.?principalType ?? 'ServicePrincipal'
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.storageQueueDataMessageProcessor)
    }
  }
]
