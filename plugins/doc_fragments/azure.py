# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Options of every krops module that calls Azure Resource Manager (module_utils.azure.LOGIN_ARGS): the
subscription and the login, as azure_teardown and azure_arc_federate take them."""


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  subscription_id:
    description: Azure subscription. Defaults to E(AZURE_SUBSCRIPTION_ID).
    type: str
  access_token:
    description:
      - ARM bearer token. Defaults to E(AZURE_ACCESS_TOKEN).
      - Without a token and without a complete service principal (O(client_id), O(secret), O(tenant)),
        the token comes from azure-identity's C(DefaultAzureCredential) chain (environment service principal,
        workload identity, managed identity, the C(az) CLI login; see docs/teardown.md).
    type: str
  client_id:
    description:
      - Service principal for the client-credentials login. Defaults to E(AZURE_CLIENT_ID).
      - Used with O(secret) and O(tenant); alone it only selects the identity of the chain.
    type: str
  secret:
    description: Service principal secret. Defaults to E(AZURE_SECRET) (the name azure.azcollection and AWX use).
    type: str
  tenant:
    description: Tenant of the service principal. Defaults to E(AZURE_TENANT) (the name azure.azcollection and AWX use).
    type: str
  endpoint:
    description: ARM base URL.
    type: str
    default: https://management.azure.com
  login_endpoint:
    description:
      - Microsoft Entra authority (an https URL) for the service principal and the chain, trusted as given
        (no instance discovery).
      - When not set, azure-identity uses E(AZURE_AUTHORITY_HOST), then V(login.microsoftonline.com).
    type: str
requirements:
  - azure-identity >= 1.27.0 (Python library), unless O(access_token) is given
"""
