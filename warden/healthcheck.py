"""`python -m warden.healthcheck [ADDRESS]`: exit 0 when a warden process answers SERVING.

The container image's HEALTHCHECK and the compose file's health checks run this inside the
container. It asks the standard `grpc.health.v1.Health` service, which every warden server
answers without a credential, and imports nothing of warden's own beyond this file, so it starts
in a fraction of `warden --help`'s time.
"""

from __future__ import annotations

import argparse
import os
import sys

DEFAULT_ADDRESS = "127.0.0.1:7401"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m warden.healthcheck",
        description="Ask a warden process's gRPC health service; exit 0 on SERVING, 1 otherwise.",
    )
    parser.add_argument(
        "address", nargs="?", default=os.environ.get("WARDEN_HEALTH_ADDRESS", DEFAULT_ADDRESS),
        help=f"HOST:PORT or unix:PATH (default WARDEN_HEALTH_ADDRESS, else {DEFAULT_ADDRESS})",
    )
    parser.add_argument("--service", default="", help="the health entry to ask (default '': the whole server)")
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds to wait for the answer (default 3)")
    args = parser.parse_args(argv)

    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(args.address) as channel:
        try:
            answer = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=args.service), timeout=args.timeout
            )
        except grpc.RpcError as exc:
            print(f"{args.address}: {exc.code().name}: {exc.details()}", file=sys.stderr)
            return 1
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status)
    print(f"{args.address}: {status}")
    return 0 if answer.status == health_pb2.HealthCheckResponse.SERVING else 1


if __name__ == "__main__":
    sys.exit(main())
