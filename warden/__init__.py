"""warden: shared contracts (generated gRPC stubs, grants, canonical JSON) and the `warden` CLI."""
