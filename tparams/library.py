"""Which QUIC library a server runs, from what it sent (pure; no I/O).

The method of the QUIC Hunter study (IMC 2023): libraries serialise their
transport parameters in a fixed order of their own, and they answer a client
that offers an unknown ALPN (``invalid``) with a CONNECTION_CLOSE whose error
code and reason phrase are their own. Both traits are learned
from real servers (``learn_signatures``; the data file is
datasets/library_signatures.json) and never written by hand.

Matching the order: a server only sends the parameters its configuration
needs (ngtcp2 leaves out a default ``max_ack_delay``), so an observed order
is matched against the *precedence* the library showed in every learning
handshake (id a before id b), not only against the exact sequences seen. An
order that puts any learned pair the other way round rules the library out.
A library whose order varied between connections of one server during
learning is marked randomised; it is matched on the set of ids instead.

Values only break ties between libraries whose order and close both fit: a
parameter the library sent with one constant value in every learning
handshake counts as a match when the server sent that value.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations

from tparams.codec import DecodedParameters
from tparams.paramset import ParamSet, order_fingerprint, order_signature

UNKNOWN = "unknown"
SIGNATURES_FORMAT = 1

# An order with learned ids in learned precedence may still carry a few ids the
# library never sent while learning (retry_source_connection_id after a Retry,
# a preferred_address); more than this many unseen ids is a different library.
MAX_UNSEEN_IDS = 2
# Fewer ids than this in common with a library say too little about its order.
MIN_COMMON_IDS = 3


@dataclass(frozen=True)
class CloseObservation:
    """The CONNECTION_CLOSE a server sent when offered ALPN ``invalid``."""

    error_code: int
    reason_phrase: str

    def as_dict(self) -> dict[str, object]:
        return {"error_code": self.error_code, "reason_phrase": self.reason_phrase}

    def describe(self) -> str:
        return f"close 0x{self.error_code:x} {self.reason_phrase!r}"


@dataclass(frozen=True)
class Identification:
    library: str
    library_evidence: str
    candidates: tuple[str, ...] = ()


@dataclass(frozen=True)
class LibrarySignature:
    library: str
    orders: tuple[str, ...]  # order_signature strings seen while learning
    order_randomised: bool
    precedence: frozenset[tuple[str, str]]  # (a, b): a came before b in every learned order
    known_ids: frozenset[str]
    constant_values: Mapping[str, object]
    closes: tuple[CloseObservation, ...]


@dataclass(frozen=True)
class LibrarySignatures:
    signatures: tuple[LibrarySignature, ...]
    learned_at: str | None = None

    @classmethod
    def from_document(cls, document: Mapping[str, object]) -> "LibrarySignatures":
        if document.get("format") != SIGNATURES_FORMAT:
            raise ValueError(f"library signatures: format {document.get('format')!r}, "
                             f"expected {SIGNATURES_FORMAT}")
        signatures = []
        for library, entry in sorted(document["libraries"].items()):
            orders = tuple(order["signature"] for order in entry["orders"])
            signatures.append(LibrarySignature(
                library=library,
                orders=orders,
                order_randomised=bool(entry["order_randomised"]),
                precedence=_precedence(orders),
                known_ids=frozenset(token for order in orders for token in _tokens(order)),
                constant_values=dict(entry.get("constant_values", {})),
                closes=tuple(CloseObservation(c["error_code"], c["reason_phrase"])
                             for c in entry.get("invalid_alpn_close", [])),
            ))
        return cls(tuple(signatures), document.get("provenance", {}).get("learned_at"))

    @property
    def libraries(self) -> tuple[str, ...]:
        return tuple(signature.library for signature in self.signatures)


def _tokens(signature: str) -> list[str]:
    return signature.split("-") if signature else []


def _precedence(orders: Iterable[str]) -> frozenset[tuple[str, str]]:
    """Pairs (a, b) that appeared as a-before-b in some order and never b-before-a."""
    seen: set[tuple[str, str]] = set()
    for order in orders:
        tokens = _tokens(order)
        seen.update((a, b) for a, b in combinations(tokens, 2) if a != b)
    return frozenset(pair for pair in seen if (pair[1], pair[0]) not in seen)


@dataclass(frozen=True)
class _OrderFit:
    library: str
    kind: str  # "exact", "consistent", "id-set" (randomised library)
    agreements: int
    unseen: tuple[str, ...]

    def describe(self) -> str:
        unseen = f", ids never seen while learning: {'-'.join(self.unseen)}" if self.unseen else ""
        if self.kind == "exact":
            return f"order matches {self.library} exactly"
        if self.kind == "id-set":
            return f"ids fit {self.library}, whose order is randomised{unseen}"
        return f"order consistent with {self.library} ({self.agreements} learned pairs agree{unseen})"


def _order_fit(signature: LibrarySignature, observed: str) -> _OrderFit | None:
    tokens = _tokens(observed)
    unseen = tuple(token for token in tokens if token not in signature.known_ids)
    common = len(set(tokens)) - len(set(unseen))
    if len(set(tokens)) != len(tokens):
        return None  # an id sent twice is no library's serialiser at work
    if signature.order_randomised:
        if common >= MIN_COMMON_IDS and len(unseen) <= MAX_UNSEEN_IDS:
            return _OrderFit(signature.library, "id-set", 0, unseen)
        return None
    if observed in signature.orders:
        return _OrderFit(signature.library, "exact", len(tokens) * (len(tokens) - 1) // 2, ())
    agreements = 0
    for a, b in combinations(tokens, 2):
        if (b, a) in signature.precedence:
            return None
        agreements += (a, b) in signature.precedence
    if common >= MIN_COMMON_IDS and len(unseen) <= MAX_UNSEEN_IDS:
        return _OrderFit(signature.library, "consistent", agreements, unseen)
    return None


_FIT_RANK = {"exact": 0, "consistent": 1, "id-set": 2}


def classify(
    signatures: LibrarySignatures,
    param_ids: Sequence[int] | None = None,
    values: Mapping[str, object] | None = None,
    close: CloseObservation | None = None,
    malformed: bool = False,
) -> Identification:
    """The library of one server, from the ids it sent in wire order (None: no
    completed handshake), their values, and its answer to ALPN ``invalid``.

    ``malformed``: the decoder had findings. No library's own serialiser emits
    a duplicate id or a broken value, so such a server is not any library as
    learned, whatever its close says: it stays unknown.
    """
    if malformed:
        return Identification(UNKNOWN, "transport parameters malformed (decoder findings); "
                                       "no learned library serialises like this")
    evidence: list[str] = []
    order_candidates: list[str] | None = None
    if param_ids:
        observed = order_signature(param_ids)
        fits = [fit for s in signatures.signatures if (fit := _order_fit(s, observed))]
        if fits:
            best = min(_FIT_RANK[fit.kind] for fit in fits)
            fits = [fit for fit in fits if _FIT_RANK[fit.kind] == best]
            evidence.extend(fit.describe() for fit in fits)
        else:
            evidence.append(f"order {observed} fits no learned library")
        order_candidates = [fit.library for fit in fits]

    close_candidates: list[str] | None = None
    if close is not None:
        close_candidates = [s.library for s in signatures.signatures if close in s.closes]
        evidence.append(f"{close.describe()} " + (f"seen from {', '.join(close_candidates)}"
                                                  if close_candidates else "seen from no learned library"))

    if order_candidates is None and close_candidates is None:
        return Identification(UNKNOWN, "no transport parameters and no CONNECTION_CLOSE to go by")
    if order_candidates is None:
        candidates = close_candidates
    elif close_candidates is None:
        candidates = order_candidates
    else:
        candidates = [library for library in order_candidates if library in close_candidates]
        if order_candidates and close_candidates and not candidates:
            evidence.append("order and close disagree")
    candidates = candidates or []

    if len(candidates) > 1 and values:
        scores = {library: _value_matches(signatures, library, values) for library in candidates}
        top = max(scores.values())
        if list(scores.values()).count(top) == 1:
            winner = max(scores, key=scores.get)
            evidence.append(f"values break the tie: {top} constant {winner} values match")
            candidates = [winner]
    if len(candidates) == 1:
        return Identification(candidates[0], "; ".join(evidence), tuple(candidates))
    if len(candidates) > 1:
        evidence.append(f"cannot tell {' / '.join(candidates)} apart")
    return Identification(UNKNOWN, "; ".join(evidence), tuple(candidates))


def classify_decoded(signatures: LibrarySignatures, decoded: DecodedParameters | None,
                     close: CloseObservation | None = None) -> Identification:
    """``classify`` from the codec's decoding of a server's parameters."""
    if decoded is None:
        return classify(signatures, None, None, close)
    return classify(signatures, decoded.ids, ParamSet.from_decoded(decoded).as_sent(), close,
                    malformed=bool(decoded.findings))


def _value_matches(signatures: LibrarySignatures, library: str, values: Mapping[str, object]) -> int:
    signature = next(s for s in signatures.signatures if s.library == library)
    return sum(1 for name, value in signature.constant_values.items() if values.get(name) == value)


@dataclass
class ServerObservations:
    """What repeated handshakes with one lab server showed (input of learning)."""

    server: str
    library: str
    software: str  # e.g. "ngtcp2 gtlsserver 0.12.1 (Debian)"
    orders: list[tuple[int, ...]] = field(default_factory=list)  # param ids, one tuple a handshake
    values: list[Mapping[str, object]] = field(default_factory=list)
    closes: list[CloseObservation] = field(default_factory=list)


def learn_signatures(observations: Iterable[ServerObservations],
                     provenance: Mapping[str, object]) -> dict[str, object]:
    """The signatures document from observed handshakes: per library its orders,
    whether the order varied between connections of one server, the values
    that never varied, and the invalid-ALPN closes."""
    by_library: dict[str, list[ServerObservations]] = {}
    for observation in observations:
        if not observation.orders and not observation.closes:
            raise ValueError(f"{observation.server}: no handshake completed and no close seen")
        by_library.setdefault(observation.library, []).append(observation)
    libraries: dict[str, object] = {}
    for library, servers in sorted(by_library.items()):
        orders: dict[str, dict[str, object]] = {}
        randomised = False
        for server in servers:
            signatures = [order_signature(ids) for ids in server.orders]
            randomised |= len(set(signatures)) > 1
            for signature, ids in zip(signatures, server.orders):
                entry = orders.setdefault(signature, {
                    "signature": signature, "fingerprint": order_fingerprint(ids),
                    "servers": [], "handshakes": 0})
                entry["handshakes"] += 1
                if server.server not in entry["servers"]:
                    entry["servers"].append(server.server)
        all_values = [values for server in servers for values in server.values]
        constant = {}
        if all_values:
            for name, value in all_values[0].items():
                if value is not None and all(v.get(name) == value for v in all_values):
                    constant[name] = value
        closes = []
        for server in servers:
            for close in server.closes:
                if close.as_dict() not in closes:
                    closes.append(close.as_dict())
        libraries[library] = {
            "order_randomised": randomised,
            "orders": sorted(orders.values(), key=lambda o: o["signature"]),
            "constant_values": dict(sorted(constant.items())),
            "invalid_alpn_close": closes,
            "servers": [{"name": s.server, "software": s.software,
                         "handshakes": len(s.orders), "invalid_alpn_handshakes": len(s.closes)}
                        for s in servers],
        }
    return {"format": SIGNATURES_FORMAT, "provenance": dict(provenance), "libraries": libraries}

