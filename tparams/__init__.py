"""The transport-parameter core: registry, codec, parameter sets, fingerprints.

Pure functions and values only (no sockets, files or processes), so that the
scanner, qreplay and notebooks share one definition of every parameter and
can test it without a network.
"""
