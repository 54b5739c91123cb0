"""What every warden gRPC server shares: the standard health service and server reflection."""

from __future__ import annotations

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection


def add_health_and_reflection(server: grpc.Server, service_name: str) -> health.HealthServicer:
    """Register health (NOT_SERVING until `set_serving`) and reflection listing `service_name`."""
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    reflection.enable_server_reflection((service_name, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
    for name in ("", service_name):
        servicer.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
    return servicer


def set_serving(servicer: health.HealthServicer, service_name: str) -> None:
    for name in ("", service_name):
        servicer.set(name, health_pb2.HealthCheckResponse.SERVING)


def bind_insecure(server: grpc.Server, address: str) -> int:
    """Bind `address` (port 0 picks a free one) and return the port; OSError when it cannot."""
    port = server.add_insecure_port(address)
    if port == 0:
        raise OSError(f"cannot bind {address}")
    return port
