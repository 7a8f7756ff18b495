"""The lab: a small Internet of real QUIC servers in network namespaces on
198.18.0.0/15, with no route out. See lab/topology.py for the addresses.

    with Lab.up() as lab:
        lab.run_in_client(["gtlsclient", lab.server("caddy").ip, "443"])
"""

from lab.core import DEFAULT_INSTANCE, Lab, LabServer, down, state_dir, status, up
from lab.kinds import LabContext, Launch, ServerKind, known_kinds, register_kind
from lab.topology import LAB_DOMAIN, ServerSpec, Topology, default_topology
from common.setfiles import builtin_set

__all__ = [
    "DEFAULT_INSTANCE", "LAB_DOMAIN", "Lab", "LabContext", "LabServer", "Launch", "ServerKind",
    "ServerSpec", "Topology", "builtin_set", "default_topology", "down", "known_kinds", "register_kind",
    "state_dir", "status", "up",
]
