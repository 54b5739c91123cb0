"""The gRPC servicer methods of the checkpoint, one module per family: checks, runs, approvals,
catalog acts and audit reads, over one shared module (`handling`) that authenticates each call,
refuses malformed requests on the record and maps errors to statuses. `grpc_api` assembles them."""
