"""The scanner's own QUIC handshake, sans-I/O: packets (shared with the capture reader),
the ClientHello template and parser, and the client state machine. No sockets here;
scanner.engine drives it."""
