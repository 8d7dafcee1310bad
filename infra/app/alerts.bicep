// Azure Monitor alerts: operator alerts the app raises, and orders dead-lettered by Service Bus.

param namePrefix string
param tags object
param location string
param applicationInsightsId string
param serviceBusNamespaceId string
param ordersQueueName string
@description('The declared senders\' names: each one\'s orders-<name> queue is watched too.')
param senderNames array = []

var senderQueues = [for s in senderNames: 'orders-${s}']
@description('Where operator alerts are e-mailed; empty for none (alerts still fire in the portal).')
param alertEmail string

resource operators 'Microsoft.Insights/actionGroups@2023-01-01' = {
  name: '${namePrefix}-operators'
  location: 'Global'
  tags: tags
  properties: {
    groupShortName: 'orderops'
    enabled: true
    emailReceivers: empty(alertEmail) ? [] : [
      {
        name: 'operator'
        emailAddress: alertEmail
        useCommonAlertSchema: true
      }
    ]
  }
}

// The app logs every operator alert with flat dimensions (alert = its kind, order_id, step,
// reason, alert_key), which the worker's exporter sends as customDimensions, and stores it in
// the OperatorAlerts table. One notification per kind per window.
resource operatorAlerts 'Microsoft.Insights/scheduledQueryRules@2023-12-01' = {
  name: '${namePrefix}-operator-alerts'
  location: location
  tags: tags
  properties: {
    displayName: 'Order pipeline: operator alert raised'
    description: 'An order failed, a compensation failed, an order id arrived twice with different content, or the Supervisor cannot read or handle an order.'
    severity: 1
    enabled: true
    evaluationFrequency: 'PT5M'
    windowSize: 'PT5M'
    scopes: [applicationInsightsId]
    criteria: {
      allOf: [
        {
          query: 'traces | where isnotempty(tostring(customDimensions["alert"])) | extend alert = tostring(customDimensions["alert"])'
          timeAggregation: 'Count'
          dimensions: [
            {
              name: 'alert'
              operator: 'Include'
              values: ['*']
            }
          ]
          operator: 'GreaterThan'
          threshold: 0
          failingPeriods: {
            numberOfEvaluationPeriods: 1
            minFailingPeriodsToAlert: 1
          }
        }
      ]
    }
    autoMitigate: false
    actions: {
      actionGroups: [operators.id]
    }
  }
}

resource deadLettered 'Microsoft.Insights/metricAlerts@2018-03-01' = {
  name: '${namePrefix}-orders-dead-lettered'
  location: 'global'
  tags: tags
  properties: {
    description: 'Orders were dead-lettered: intake failed on every delivery (storage unreachable?).'
    severity: 1
    enabled: true
    scopes: [serviceBusNamespaceId]
    evaluationFrequency: 'PT5M'
    windowSize: 'PT5M'
    criteria: {
      'odata.type': 'Microsoft.Azure.Monitor.SingleResourceMultipleMetricCriteria'
      allOf: [
        {
          criterionType: 'StaticThresholdCriterion'
          name: 'DeadletteredOrders'
          metricNamespace: 'Microsoft.ServiceBus/namespaces'
          metricName: 'DeadletteredMessages'
          dimensions: [
            {
              name: 'EntityName'
              operator: 'Include'
              values: concat([ordersQueueName], senderQueues)
            }
          ]
          operator: 'GreaterThan'
          threshold: 0
          timeAggregation: 'Maximum'
        }
      ]
    }
    actions: [
      {
        actionGroupId: operators.id
      }
    ]
  }
}
