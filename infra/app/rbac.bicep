// Role assignments, least privilege. Role ids are Azure built-in role definitions.

param storageAccountName string
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
  storageTableDataReader: '76199698-9eea-4c19-bc75-cec21354c6b6'
  serviceBusDataOwner: '090c5cfd-751d-490a-894a-3ce6f1109419'
  serviceBusDataSender: '69a216fc-b8fb-44d8-bc22-1f3c2cd27a39'
  monitoringMetricsPublisher: '3913510d-42f4-4e42-8a64-420c390055eb'
}

resource storage 'Microsoft.Storage/storageAccounts@2023-05-01' existing = {
  name: storageAccountName
}

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

// The app: host storage and deployment package (blob), its queues and tables.
var appStorageRoles = [
  roles.storageBlobDataOwner
  roles.storageQueueDataContributor
  roles.storageTableDataContributor
]

resource appStorage 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for role in appStorageRoles: {
    name: guid(storage.id, appPrincipalId, role)
    scope: storage
    properties: {
      principalId: appPrincipalId
      principalType: 'ServicePrincipal'
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', role)
    }
  }
]

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

// The deploying user: send orders, read state, rejections and alerts.
var userStorageRoles = empty(userPrincipalId) ? [] : [
  roles.storageQueueDataReader
  roles.storageTableDataReader
]

resource userStorage 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for role in userStorageRoles: {
    name: guid(storage.id, userPrincipalId, role)
    scope: storage
    properties: {
      principalId: userPrincipalId
      principalType: userPrincipalType
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', role)
    }
  }
]

resource userServiceBus 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (!empty(userPrincipalId)) {
  name: guid(namespace.id, userPrincipalId, roles.serviceBusDataSender)
  scope: namespace
  properties: {
    principalId: userPrincipalId
    principalType: userPrincipalType
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roles.serviceBusDataSender)
  }
}
