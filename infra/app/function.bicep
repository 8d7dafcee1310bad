// The function app on the Flex Consumption plan (FC1, Linux, Python), running as its
// user-assigned identity. Every setting the code reads is set here (see README, Settings).

param name string
param planName string
param location string
param tags object
param identityId string
param identityClientId string
param storageAccountName string
param deploymentContainerUrl string
param serviceBusNamespace string
param applicationInsightsConnectionString string
param pythonVersion string
param maximumInstanceCount int
param instanceMemoryMB int
param httpPerInstanceConcurrency int
@description('The app\'s own settings (queue and table names, budgets, thresholds, service URLs).')
param appSettings object
@description('real: the Agents call serviceUrls. demo: the app serves fault-injecting simulated services (function key) and the Agents call those.')
@allowed(['real', 'demo'])
param remoteServices string
@description('The URL of each real service by its setting, e.g. <Service>ServiceUrl for each service in services.json (remoteServices=real).')
param serviceUrls object
@secure()
@description('demo only: a host function key the Agents present to the simulated services.')
param simulatorKey string
@description('Client id of the Entra ID app registration operators sign in to (its app roles Orders.Read, Orders.Resubmit, Orders.Cancel and Orders.Pause); empty: App Service Authentication stays off and the operator API answers no one.')
param operatorAuthClientId string
@description('The Entra ID tenant of that app registration.')
param operatorAuthTenantId string
@description('Client ids of the applications an operator\'s token may come from, besides the registration itself.')
param operatorClientApps array
@description('The subnet for the app\'s outbound traffic (virtual network integration), where storage and Service Bus take private endpoints only; empty: none.')
param appSubnetId string

resource plan 'Microsoft.Web/serverfarms@2024-04-01' = {
  // checkov:skip=CKV_AZURE_225:Zone redundancy on Flex Consumption depends on the region; set zoneRedundant where it is offered.
  name: planName
  location: location
  tags: tags
  kind: 'functionapp'
  sku: {
    name: 'FC1'
    tier: 'FlexConsumption'
  }
  properties: {
    reserved: true
  }
}

resource app 'Microsoft.Web/sites@2024-04-01' = {
  // checkov:skip=CKV_AZURE_222:The site takes requests from the internet on purpose: the operator API (Entra ID sign-in) and the simulated services (function key) are called over it, HTTPS only; appSubnetId joins a virtual network for outbound traffic only, and an inbound private endpoint is not in this template.
  // checkov:skip=CKV_AZURE_17:Operators sign in with Entra ID (authsettingsV2 below); Agents calling the simulated services present a function key, no client certificate.
  // checkov:skip=CKV_AZURE_78:Flex Consumption has no FTP endpoint to configure (ftpsState does not apply); FTP basic-auth publishing is off below.
  // checkov:skip=CKV_AZURE_212:The app scales to zero on purpose (no cost at rest); add alwaysReady instances for production latency.
  // checkov:skip=CKV_AZURE_213:The work is queue-driven; platform health checks do not apply on Flex Consumption, GET /api/health reports reachability.
  name: name
  location: location
  tags: union(tags, { 'azd-service-name': 'api' })
  kind: 'functionapp,linux'
  identity: {
    type: 'UserAssigned'
    userAssignedIdentities: {
      '${identityId}': {}
    }
  }
  properties: {
    serverFarmId: plan.id
    httpsOnly: true
    virtualNetworkSubnetId: empty(appSubnetId) ? null : appSubnetId
    siteConfig: {
      minTlsVersion: '1.2'
      http20Enabled: true
    }
    functionAppConfig: {
      deployment: {
        storage: {
          type: 'blobContainer'
          value: deploymentContainerUrl
          authentication: {
            type: 'UserAssignedIdentity'
            userAssignedIdentityResourceId: identityId
          }
        }
      }
      scaleAndConcurrency: {
        maximumInstanceCount: maximumInstanceCount
        instanceMemoryMB: instanceMemoryMB
        triggers: {
          http: {
            perInstanceConcurrency: httpPerInstanceConcurrency
          }
        }
      }
      runtime: {
        name: 'python'
        version: pythonVersion
      }
    }
  }
}

// Deployments go through the blob container with the identity; no one needs the basic-auth
// (publishing profile) credentials of FTP or the SCM site, so they are turned off.
resource ftpBasicAuth 'Microsoft.Web/sites/basicPublishingCredentialsPolicies@2024-04-01' = {
  parent: app
  name: 'ftp'
  properties: {
    allow: false
  }
}

resource scmBasicAuth 'Microsoft.Web/sites/basicPublishingCredentialsPolicies@2024-04-01' = {
  parent: app
  name: 'scm'
  properties: {
    allow: false
  }
}

// The simulated services are HTTP functions of this same app: a demo deployment's only.
var simulatorsEnabled = remoteServices == 'demo'
var simulatorBase = 'https://${app.properties.defaultHostName}/api/sim'
// Each service is <SimulatorBaseUrl>/<service> unless its own URL setting is given.
var agentTargets = simulatorsEnabled ? {
  SimulatorBaseUrl: simulatorBase
  RemoteServiceKey: simulatorKey
} : serviceUrls

// The simulated services are function-level routes: the Agents present this host key, which
// exists only in a demo deployment. It opens the function-level routes (the simulated services,
// health, openapi.json) and no operator route: those take an operator identity, never a key.
// A key on the simulated_service function alone would be narrower, but that function exists
// only once the code is deployed, after this template runs.
resource simulatorFunctionKey 'Microsoft.Web/sites/host/functionKeys@2024-04-01' = if (simulatorsEnabled) {
  name: '${app.name}/default/agents'
  value: simulatorKey
}

// Operators by identity (docs/security-operators.md). The platform signs them in with Entra ID,
// validates their token or session cookie, strips any X-MS-* header a client sends, and hands
// the app X-MS-CLIENT-PRINCIPAL; the app checks the app role each route needs (Orders.Read,
// Orders.Resubmit) and answers 401 without a principal. Unauthenticated requests are let
// through (AllowAnonymous) rather than refused here because the machine routes (health, the
// demo's simulated services) share the site and take a function key, not an identity; the
// operator routes refuse them in the app, and only trust the header while this is enabled
// (WEBSITE_AUTH_ENABLED). No client secret: sign-in takes an ID token, callers bring an
// access token for api://<client id>.
resource authSettings 'Microsoft.Web/sites/config@2024-04-01' = {
  // These checks read the 'web' config (logging, auth, .NET, Azure Files); this is 'authsettingsV2'.
  // checkov:skip=CKV_AZURE_66:Not the web config; host logs go to Application Insights.
  // checkov:skip=CKV_AZURE_63:Not the web config; host logs go to Application Insights.
  // checkov:skip=CKV_AZURE_65:Not the web config; host logs go to Application Insights.
  // checkov:skip=CKV_AZURE_222:Not the web config; see the site resource.
  // checkov:skip=CKV_AZURE_80:Python app, no .NET Framework.
  // checkov:skip=CKV_AZURE_88:Flex Consumption keeps no content on Azure Files; the package is a blob.
  // checkov:skip=CKV_AZURE_13:This is App Service Authentication itself (authsettingsV2, checked by tests/infra), which the check does not read; it is on whenever operatorAuthClientId is given.
  parent: app
  name: 'authsettingsV2'
  properties: {
    platform: {
      enabled: !empty(operatorAuthClientId)
    }
    globalValidation: {
      requireAuthentication: false
      unauthenticatedClientAction: 'AllowAnonymous'
    }
    httpSettings: {
      requireHttps: true
    }
    identityProviders: {
      azureActiveDirectory: {
        enabled: !empty(operatorAuthClientId)
        registration: {
          clientId: operatorAuthClientId
          openIdIssuer: '${environment().authentication.loginEndpoint}${operatorAuthTenantId}/v2.0'
        }
        validation: {
          allowedAudiences: [
            'api://${operatorAuthClientId}'
            operatorAuthClientId
          ]
          // A token for the API that another application of the tenant got (any app may ask
          // for one) is refused: only the console's sign-in and the named clients.
          defaultAuthorizationPolicy: {
            allowedApplications: concat([operatorAuthClientId], operatorClientApps)
          }
        }
      }
    }
    login: {
      // The app calls nothing on the operator's behalf: no tokens kept.
      tokenStore: {
        enabled: false
      }
    }
  }
}

resource settings 'Microsoft.Web/sites/config@2024-04-01' = {
  // These checks read the 'web' config (logging, auth, .NET, Azure Files); this is 'appsettings'.
  // checkov:skip=CKV_AZURE_66:Not the web config; host logs go to Application Insights.
  // checkov:skip=CKV_AZURE_63:Not the web config; host logs go to Application Insights.
  // checkov:skip=CKV_AZURE_65:Not the web config; host logs go to Application Insights.
  // checkov:skip=CKV_AZURE_222:Not the web config; see the site resource.
  // checkov:skip=CKV_AZURE_80:Python app, no .NET Framework.
  // checkov:skip=CKV_AZURE_13:Not the web config; App Service Authentication is the authsettingsV2 resource below.
  // checkov:skip=CKV_AZURE_88:Flex Consumption keeps no content on Azure Files; the package is a blob.
  parent: app
  name: 'appsettings'
  properties: union(appSettings, agentTargets, {
    // Identity-based connections: no keys, no connection strings.
    AzureWebJobsStorage__accountName: storageAccountName
    AzureWebJobsStorage__credential: 'managedidentity'
    AzureWebJobsStorage__clientId: identityClientId
    ServiceBusConnection__fullyQualifiedNamespace: serviceBusNamespace
    ServiceBusConnection__credential: 'managedidentity'
    ServiceBusConnection__clientId: identityClientId
    APPLICATIONINSIGHTS_CONNECTION_STRING: applicationInsightsConnectionString
    APPLICATIONINSIGHTS_AUTHENTICATION_STRING: 'ClientId=${identityClientId};Authorization=AAD'
    // The worker sets up OpenTelemetry export before it imports the app, and the host (in
    // telemetryMode OpenTelemetry, host.json) then leaves the app's log records to it, so each
    // arrives once, with its dimensions. The same list as shared/tracing.py NOT_INSTRUMENTED.
    PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY: 'true'
    OTEL_PYTHON_DISABLED_INSTRUMENTATIONS: 'azure_sdk,django,fastapi,flask,httpx,httpx2,psycopg2,requests,urllib,urllib3'
    // Whole traces until the app loads (shared/tracing.py TRACES_SAMPLER), not the distro's
    // default of about 5 spans a second; the app then samples by order (OrderTraceSampleRatio).
    OTEL_TRACES_SAMPLER: 'microsoft.fixed_percentage'
    OTEL_TRACES_SAMPLER_ARG: '1.0'
    SimulatorsEnabled: string(simulatorsEnabled)
  })
}

output name string = app.name
output id string = app.id
output defaultHostName string = app.properties.defaultHostName
