// Platform logs and metrics of the Service Bus namespace, the storage services and the function
// app, to Log Analytics beside the app's own telemetry.

param logAnalyticsId string
param storageAccountName string
param serviceBusNamespaceName string
param functionAppName string
@description('Also send storage request logs: one record per table or queue transaction (about 17 per order), so billed ingestion grows with traffic.')
param storageRequestLogs bool

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

resource namespace 'Microsoft.ServiceBus/namespaces@2026-01-01' existing = {
  name: serviceBusNamespaceName
}

resource app 'Microsoft.Web/sites@2024-04-01' existing = {
  name: functionAppName
}

var allLogs = [
  {
    categoryGroup: 'allLogs'
    enabled: true
  }
]
var allMetrics = [
  {
    category: 'AllMetrics'
    enabled: true
  }
]
var storageLogs = storageRequestLogs ? allLogs : []

resource serviceBusDiagnostics 'Microsoft.Insights/diagnosticSettings@2021-05-01-preview' = {
  name: 'to-log-analytics'
  scope: namespace
  properties: {
    workspaceId: logAnalyticsId
    logs: allLogs
    metrics: allMetrics
  }
}

resource appDiagnostics 'Microsoft.Insights/diagnosticSettings@2021-05-01-preview' = {
  name: 'to-log-analytics'
  scope: app
  properties: {
    workspaceId: logAnalyticsId
    logs: allLogs
    metrics: allMetrics
  }
}

resource queueDiagnostics 'Microsoft.Insights/diagnosticSettings@2021-05-01-preview' = {
  name: 'to-log-analytics'
  scope: queueService
  properties: {
    workspaceId: logAnalyticsId
    logs: storageLogs
    metrics: allMetrics
  }
}

resource tableDiagnostics 'Microsoft.Insights/diagnosticSettings@2021-05-01-preview' = {
  name: 'to-log-analytics'
  scope: tableService
  properties: {
    workspaceId: logAnalyticsId
    logs: storageLogs
    metrics: allMetrics
  }
}
