"""Views of the health state: the HTTP endpoints and the gRPC health service."""
