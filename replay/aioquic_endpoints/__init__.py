"""qreplay's own aioquic bulk-download client and server (``python -m replay.aioquic_endpoints.client|server``)."""
