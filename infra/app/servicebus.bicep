// Service Bus: the orders queues (the default one and each declared sender's), where other
// systems hand us work. Local (key) auth is off.

param name string
param location string
param tags object
param ordersQueueName string
@description('The declared senders\' names: each sends on a queue of its own, orders-<name> (docs/security.md, Senders).')
param senderNames array = []
@description('Enabled: reachable from the internet, with Entra ID and RBAC. Disabled: through private endpoints only, which needs the Premium tier (docs/deploying.md).')
@allowed(['Enabled', 'Disabled'])
param publicNetworkAccess string

// Private endpoints, the only way in with public access off, exist on Premium alone.
var premium = publicNetworkAccess == 'Disabled'

resource namespace 'Microsoft.ServiceBus/namespaces@2026-01-01' = {
  name: name
  location: location
  tags: tags
  sku: {
    // Duplicate detection needs Standard or above; private endpoints need Premium (one
    // messaging unit).
    name: premium ? 'Premium' : 'Standard'
    tier: premium ? 'Premium' : 'Standard'
    capacity: premium ? 1 : null
  }
  properties: {
    disableLocalAuth: true
    minimumTlsVersion: '1.2'
    publicNetworkAccess: publicNetworkAccess
  }
}

// Every queue orders arrive on is one of these: the default one and each sender's.
var ordersQueueProperties = {
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

resource orders 'Microsoft.ServiceBus/namespaces/queues@2026-01-01' = {
  parent: namespace
  name: ordersQueueName
  properties: ordersQueueProperties
}

resource senderQueues 'Microsoft.ServiceBus/namespaces/queues@2026-01-01' = [
  for s in senderNames: {
    parent: namespace
    name: 'orders-${s}'
    properties: ordersQueueProperties
  }
]

output name string = namespace.name
output id string = namespace.id
output fullyQualifiedNamespace string = '${namespace.name}.servicebus.windows.net'
output ordersQueueName string = orders.name
