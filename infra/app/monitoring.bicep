// Log Analytics and Application Insights; ingestion by Entra ID only (local auth off).

param logAnalyticsName string
param applicationInsightsName string
param location string
param tags object

resource logAnalytics 'Microsoft.OperationalInsights/workspaces@2025-07-01' = {
  name: logAnalyticsName
  location: location
  tags: tags
  properties: {
    sku: {
      name: 'PerGB2018'
    }
    retentionInDays: 30
    features: {
      disableLocalAuth: true
    }
  }
}

resource applicationInsights 'Microsoft.Insights/components@2020-02-02' = {
  name: applicationInsightsName
  location: location
  tags: tags
  kind: 'web'
  properties: {
    Application_Type: 'web'
    WorkspaceResourceId: logAnalytics.id
    DisableLocalAuth: true
  }
}

// The orders workbook. Its queries read what the app's traces put in customDimensions (span
// attributes and span events, README "Tracing"); tests/infra/test_workbook.py holds each name
// to what the code emits.
var workbookQueries = [
  {
    title: 'Orders reaching each state'
    visualization: 'timechart'
    query: 'traces | where message == "order.transition" | extend state = tostring(customDimensions["state"]) | summarize transitions = count() by state, bin(timestamp, 5m)'
  }
  {
    title: 'Step latency (Agent invocations, ms)'
    visualization: 'table'
    query: 'requests | where name startswith "agent " | extend step = tostring(customDimensions["order.step"]) | summarize p50 = percentile(duration, 50), p95 = percentile(duration, 95), p99 = percentile(duration, 99), calls = count() by step'
  }
  {
    title: 'Failures and timeouts per step'
    visualization: 'table'
    query: 'union (requests | where name startswith "agent " | extend step = tostring(customDimensions["order.step"]), outcome = tostring(customDimensions["order.outcome"]) | where outcome != "ok"), (dependencies | where name startswith "supervisor " and name != "supervisor tick" | extend step = tostring(customDimensions["order.step"]), outcome = name) | summarize count() by step, outcome'
  }
  {
    title: 'Compensations'
    visualization: 'timechart'
    query: 'traces | where message == "order.transition" | extend compensation = tostring(customDimensions["compensation"]) | where isnotempty(compensation) | summarize count() by compensation, bin(timestamp, 1h)'
  }
  {
    title: 'Operator alerts'
    visualization: 'table'
    query: 'traces | where isnotempty(tostring(customDimensions["alert"])) | project timestamp, alert = tostring(customDimensions["alert"]), order = tostring(customDimensions["order_id"]), step = tostring(customDimensions["step"]), reason = tostring(customDimensions["reason"]) | order by timestamp desc'
  }
]

resource workbook 'Microsoft.Insights/workbooks@2023-06-01' = {
  name: guid(applicationInsights.id, 'orders-workbook')
  location: location
  tags: tags
  kind: 'shared'
  properties: {
    displayName: 'Orders'
    category: 'workbook'
    sourceId: applicationInsights.id
    version: 'Notebook/1.0'
    serializedData: string({
      version: 'Notebook/1.0'
      items: [for (q, i) in workbookQueries: {
        type: 3
        name: 'query-${i}'
        content: {
          version: 'KqlItem/1.0'
          title: q.title
          query: q.query
          queryType: 0
          resourceType: 'microsoft.insights/components'
          visualization: q.visualization
          timeContext: {
            durationMs: 86400000
          }
        }
      }]
      isLocked: false
      fallbackResourceIds: [
        applicationInsights.id
      ]
    })
  }
}

output applicationInsightsName string = applicationInsights.name
output applicationInsightsId string = applicationInsights.id
output connectionString string = applicationInsights.properties.ConnectionString
output logAnalyticsId string = logAnalytics.id
