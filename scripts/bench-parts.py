#!/usr/bin/env python3
"""One boto3 transfer for scripts/bench-parts.sh, timed from inside.

    bench-parts.py ENDPOINT crt|boto3 put|get IN_FLIGHT|default PART_BYTES FILE BUCKET KEY

`crt` is s3transfer's CRTTransferManager on an awscrt S3 client (what
boto3 picks with `preferred_transfer_client="crt"`; boto3's own helper
for that always speaks TLS to AWS's endpoint, so the client and the
serializer are built here with the endpoint and `use_ssl=False`).
IN_FLIGHT caps the CRT's connections for the request
(`max_request_concurrency`, which s3transfer hands to awscrt as
`max_active_connections_override`); `default` leaves the CRT's own
choice (from its throughput target) and part size.

`boto3` is boto3's classic `upload_file`/`download_file` with
`TransferConfig(max_concurrency=IN_FLIGHT)` (threads).

Parts are PART_BYTES (also the multipart threshold) unless `default`.
Prints one line: wall seconds, user and system CPU seconds of this
process (all its threads, the CRT's included) over the transfer alone:
the interpreter's start and the imports are not counted, as a
long-running program would not pay them per transfer.
"""

import resource
import sys
import time

import boto3
import botocore.session
from botocore.config import Config


def main():
    endpoint, mode, op, in_flight, part, path, bucket, key = sys.argv[1:]
    part = int(part)
    region = "us-east-1"
    config = Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1})
    client = boto3.client("s3", endpoint_url=endpoint, region_name=region, config=config)

    if mode == "crt":
        from s3transfer.crt import (
            BotocoreCRTCredentialsWrapper,
            BotocoreCRTRequestSerializer,
            CRTTransferManager,
            create_s3_crt_client,
        )
        from s3transfer.manager import TransferConfig as CrtConfig

        creds = BotocoreCRTCredentialsWrapper(client._get_credentials())
        crt = create_s3_crt_client(
            region,
            crt_credentials_provider=creds.to_crt_credentials_provider(),
            use_ssl=False,
        )
        serializer = BotocoreCRTRequestSerializer(
            botocore.session.Session(),
            {"region_name": region, "endpoint_url": endpoint, "config": config},
        )
        tconf = None
        if in_flight != "default":
            tconf = CrtConfig(
                multipart_threshold=part,
                multipart_chunksize=part,
                max_request_concurrency=int(in_flight),
            )
        manager = CRTTransferManager(crt, serializer, config=tconf)

        def run():
            if op == "put":
                future = manager.upload(path, bucket, key)
            else:
                future = manager.download(bucket, key, path)
            future.result()

    elif mode == "boto3":
        from boto3.s3.transfer import TransferConfig

        if in_flight == "default":
            tconf = TransferConfig(preferred_transfer_client="classic")
        else:
            tconf = TransferConfig(
                multipart_threshold=part,
                multipart_chunksize=part,
                max_concurrency=int(in_flight),
                preferred_transfer_client="classic",
            )

        def run():
            if op == "put":
                client.upload_file(path, bucket, key, Config=tconf)
            else:
                client.download_file(bucket, key, path, Config=tconf)

    else:
        sys.exit(f"bench-parts.py: unknown client {mode!r}")

    before = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.monotonic()
    run()
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_SELF)
    if mode == "crt":
        manager.shutdown()
    print(f"{wall:.3f} {after.ru_utime - before.ru_utime:.3f} {after.ru_stime - before.ru_stime:.3f}")


if __name__ == "__main__":
    main()
