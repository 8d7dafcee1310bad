// Storage: the Functions host (blobs, trigger queues), the app's queues and tables, and the
// deployment package container. Shared-key access is off: everything authenticates with Entra ID.

param name string
param location string
param tags object
param deploymentContainerName string
@description('Storage queues the app uses; the host creates <name>-poison on demand, we create them up front.')
param queueNames array
@description('Each declared sender\'s status queue (status-<name>).')
param statusQueueNames array = []
param tableNames array
@description('Enabled: reachable from the internet, with Entra ID and RBAC. Disabled: through private endpoints only (docs/deploying.md).')
@allowed(['Enabled', 'Disabled'])
param publicNetworkAccess string

// Off (Disabled), the account takes requests only through private endpoints; trusted Azure
// services (the platform's own, such as diagnostics) still pass.
var publicAccess = publicNetworkAccess == 'Enabled'

resource storage 'Microsoft.Storage/storageAccounts@2023-05-01' = {
  // checkov:skip=CKV_AZURE_35:Deny by default is the publicNetworkAccess=Disabled deployment (private endpoints); the quickstart's default allows the internet, where every request still needs Entra ID (shared keys are off) and an RBAC role.
  // checkov:skip=CKV_AZURE_59:Public network access is the publicNetworkAccess parameter, off for a deployment with private endpoints; on by default for the quickstart, with Entra ID and RBAC on every request and no anonymous blob access.
  name: name
  location: location
  tags: tags
  kind: 'StorageV2'
  sku: {
    name: 'Standard_GRS'
  }
  properties: {
    minimumTlsVersion: 'TLS1_2'
    supportsHttpsTrafficOnly: true
    allowBlobPublicAccess: false
    allowSharedKeyAccess: false
    allowCrossTenantReplication: false
    defaultToOAuthAuthentication: true
    publicNetworkAccess: publicNetworkAccess
    networkAcls: {
      defaultAction: publicAccess ? 'Allow' : 'Deny'
      bypass: 'AzureServices'
    }
    encryption: {
      keySource: 'Microsoft.Storage'
      requireInfrastructureEncryption: true
      services: {
        blob: { enabled: true }
        file: { enabled: true }
        queue: { enabled: true, keyType: 'Account' }
        table: { enabled: true, keyType: 'Account' }
      }
    }
  }
}

resource blobService 'Microsoft.Storage/storageAccounts/blobServices@2023-05-01' = {
  parent: storage
  name: 'default'
  properties: {
    deleteRetentionPolicy: {
      enabled: true
      days: 7
    }
    containerDeleteRetentionPolicy: {
      enabled: true
      days: 7
    }
  }
}

resource deploymentContainer 'Microsoft.Storage/storageAccounts/blobServices/containers@2023-05-01' = {
  parent: blobService
  name: deploymentContainerName
  properties: {
    publicAccess: 'None'
  }
}

resource queueService 'Microsoft.Storage/storageAccounts/queueServices@2023-05-01' = {
  parent: storage
  name: 'default'
}

resource queues 'Microsoft.Storage/storageAccounts/queueServices/queues@2023-05-01' = [
  for q in queueNames: {
    parent: queueService
    name: q
  }
]

resource poisonQueues 'Microsoft.Storage/storageAccounts/queueServices/queues@2023-05-01' = [
  for q in queueNames: {
    parent: queueService
    name: '${q}-poison'
  }
]

// A declared sender's status queue (status-<name>): the app only puts messages on it.
resource statusQueues 'Microsoft.Storage/storageAccounts/queueServices/queues@2023-05-01' = [
  for q in statusQueueNames: {
    parent: queueService
    name: q
  }
]

resource tableService 'Microsoft.Storage/storageAccounts/tableServices@2023-05-01' = {
  parent: storage
  name: 'default'
}

resource tables 'Microsoft.Storage/storageAccounts/tableServices/tables@2023-05-01' = [
  for t in tableNames: {
    parent: tableService
    name: t
  }
]

output name string = storage.name
output id string = storage.id
output blobEndpoint string = storage.properties.primaryEndpoints.blob
output queueEndpoint string = storage.properties.primaryEndpoints.queue
output tableEndpoint string = storage.properties.primaryEndpoints.table
