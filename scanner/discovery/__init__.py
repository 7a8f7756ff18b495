"""Stateless discovery of QUIC servers: a Version Negotiation probe sent by ZMap.

Every QUIC server must answer an Initial-sized datagram carrying a version it
does not support with a Version Negotiation packet (RFC 9000, 6.1), which
lists the versions it does support. ZMap's ``udp`` probe module sends any
payload, so the probe is generated here (``probe``), ZMap is planned and run
(``zmap``, ``plan``, ``netinfo``) and its answers are judged (``response``).
"""
