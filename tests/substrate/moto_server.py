"""moto's server as the suite runs it: ``python -m tests.substrate.moto_server -H 127.0.0.1 -p PORT``.

Two of moto's own costs are taken out; neither changes an answer the suite reads:

- ``MOTO_EC2_LOAD_DEFAULT_AMIS=false`` (moto/settings.py): moto otherwise loads its list of public Amazon AMIs,
  with a snapshot each, into every EC2 region backend it creates, after every reset; that was a sixth of the
  server's CPU in the AWS sweep tests. Nothing in krops or its tests lists images (run_instances does not look
  the AMI up), and the sweep lists snapshots it owns (``OwnerIds=["self"]``), which those are not.
- ``moto.eks.utils.validate_role_arn`` builds a boto3 Session on every call only to list the partitions; the
  list is read once here and the check itself is moto's (another sixth, in EKS cluster and nodegroup creates).
"""

from __future__ import annotations

import os
import sys


class _Partitions:
    """What validate_role_arn asks of its Session: the partitions, read once from botocore's own data."""

    names = None

    def get_available_partitions(self):
        if _Partitions.names is None:
            import boto3

            _Partitions.names = list(boto3.Session().get_available_partitions())
        return list(_Partitions.names)


def main():
    os.environ.setdefault("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
    import moto.eks.utils
    from moto.server import main as serve

    from tests.substrate import prewarm

    moto.eks.utils.Session = _Partitions
    sys.argv[0] = "moto_server"
    prewarm.tune_gc()  # moto's backends allocate on every call; its imported code is not walked again
    serve()


if __name__ == "__main__":
    main()
