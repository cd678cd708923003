# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""Options of every krops module that talks to AWS (module_utils.aws.AWS_ARGS)."""


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  profile:
    description:
      - Named AWS profile (from C(~/.aws/config) and C(~/.aws/credentials)) to use.
      - When not set, boto3's usual chain applies (E(AWS_PROFILE), E(AWS_ACCESS_KEY_ID) and
        E(AWS_SECRET_ACCESS_KEY), instance or web-identity credentials).
      - Mutually exclusive with O(access_key) and O(secret_key).
    type: str
  endpoint_url:
    description:
      - URL to send every AWS API call to instead of the service's public endpoint
        (an emulator such as moto, or a VPC endpoint).
      - When not set, E(AWS_ENDPOINT_URL) is used if present.
    type: str
  access_key:
    description:
      - AWS access key ID. Give it together with O(secret_key).
      - Prefer a profile or the E(AWS_ACCESS_KEY_ID) environment variable, which keep the key out of task arguments.
    type: str
  secret_key:
    description:
      - AWS secret access key, with O(access_key).
    type: str
  session_token:
    description:
      - AWS session token for temporary credentials, with O(access_key) and O(secret_key).
    type: str
requirements:
  - boto3 >= 1.44.8 and botocore >= 1.44.8 (Python libraries)
"""
