// Service Bus: the orders queue, where other systems hand us work. Local (key) auth is off.

param name string
param location string
param tags object
param ordersQueueName string

resource namespace 'Microsoft.ServiceBus/namespaces@2026-01-01' = {
  name: name
  location: location
  tags: tags
  sku: {
    // Duplicate detection needs Standard or above.
    name: 'Standard'
    tier: 'Standard'
  }
  properties: {
    disableLocalAuth: true
    minimumTlsVersion: '1.2'
    publicNetworkAccess: 'Enabled'
  }
}

resource orders 'Microsoft.ServiceBus/namespaces/queues@2026-01-01' = {
  parent: namespace
  name: ordersQueueName
  properties: {
    // Intake raises only for faults worth retrying (storage down); after ten deliveries the
    // message is dead-lettered, where an alert rule sees it.
    maxDeliveryCount: 10
    // Intake takes milliseconds; a minute leaves room for a slow storage call and retries.
    lockDuration: 'PT1M'
    // The sender sets MessageId = order id, so a resend within the window is dropped.
    requiresDuplicateDetection: true
    duplicateDetectionHistoryTimeWindow: 'PT1H'
    deadLetteringOnMessageExpiration: true
    defaultMessageTimeToLive: 'P7D'
    maxSizeInMegabytes: 1024
    enablePartitioning: false
    requiresSession: false
  }
}

output name string = namespace.name
output id string = namespace.id
output fullyQualifiedNamespace string = '${namespace.name}.servicebus.windows.net'
output ordersQueueName string = orders.name
