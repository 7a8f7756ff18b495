"""Which QUIC library a server runs, from what it sent (pure; no I/O).

The method of the QUIC Hunter study (IMC 2023), widened: libraries serialise
their transport parameters in an order of their own (or shuffle it on every
connection), and answer a client that offers only an unknown ALPN
(``invalid``) in a way of their own. Beside those two, a completed handshake
shows habits no operator sets: where and how GREASE parameters go, which
integers are encoded longer than needed, the length of the server's
connection IDs, the versions in version_information. Every trait is learned
from real servers (``learn_signatures``; the data file is
datasets/library_signatures.json) and never written by hand.

A library is named when it alone fits every trait observed (*keys*); a trait
it never showed while learning rules it out. The flow-control values (the six
``FLOW_CONTROL`` parameters) are what operators tune, so they are never
looked at. The other values (idle timeout, payload size, ack delays, ...) are
configurable too; they only break a tie between libraries that fit every key,
as does a Retry.

Matching the order: a server only sends the parameters its configuration
needs (ngtcp2 leaves out a default ``max_ack_delay``), so an observed order is
matched against the *precedence* the library showed in every learning
handshake (id a before id b), not only against the exact sequences seen. An
order that puts any learned pair the other way round rules the library out. A
library whose order varied between connections of one server during learning
is marked randomised; it is matched on the set of ids instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import combinations

from tparams.codec import DecodedParameters, VersionInformation
from tparams.paramset import PERFORMANCE_PARAMETERS, ParamSet, order_fingerprint, order_signature
from tparams.registry import ParamType, id_for, is_grease, spec_for
from tparams.varint import decode_varint, encode_varint

UNKNOWN = "unknown"
SIGNATURES_FORMAT = 2

# What operators tune per deployment (the connection and stream windows and stream
# limits): never a key, never a tie-breaker.
FLOW_CONTROL = tuple(name for name in PERFORMANCE_PARAMETERS if name.startswith("initial_max_"))
# Values that may break a tie: the rest of the twelve, and max_datagram_frame_size.
TIE_BREAK_VALUES = tuple(name for name in PERFORMANCE_PARAMETERS if name not in FLOW_CONTROL) + (
    "max_datagram_frame_size",
)

# An order with learned ids in learned precedence may still carry a few ids the
# library never sent while learning (retry_source_connection_id after a Retry,
# a preferred_address); more than this many unseen ids is a different library.
MAX_UNSEEN_IDS = 2
# Fewer ids than this in common with a library say too little about its order.
MIN_COMMON_IDS = 3

TIE_BROKEN = "values and Retry break the tie"  # in the evidence of a verdict that needed them

_INITIAL_SOURCE_CID = id_for("initial_source_connection_id")
_FLOW_CONTROL_IDS = frozenset(id_for(name) for name in FLOW_CONTROL)


@dataclass(frozen=True)
class HandshakeTraits:
    """What one completed handshake shows of the server's library."""

    order: str  # tparams.paramset.order_signature, GREASE as 'G'
    grease: str  # how many GREASE parameters (where: in ``order``; their lengths are random)
    encoding: tuple[str, ...]  # varints longer than needed, e.g. 'value of 04 in 4 bytes'
    cid_length: int | None  # of the server's initial_source_connection_id
    version_information: str | None  # the versions the server lists as available
    retry: str  # 'none', or 'token N bytes'
    values: Mapping[str, object]  # TIE_BREAK_VALUES as sent

    def keys(self) -> dict[str, object]:
        return {"grease": self.grease, "encoding": list(self.encoding), "cid_length": self.cid_length,
                "version_information": self.version_information}


def handshake_traits(decoded: DecodedParameters, retry: bool = False,
                     retry_token_length: int | None = None) -> HandshakeTraits:
    """The traits of a server's (well-formed) transport parameters and its Retry."""
    grease = sum(1 for p in decoded.parameters if is_grease(p.id))
    cid = next((p.value for p in decoded.parameters if p.id == _INITIAL_SOURCE_CID), None)
    version_information = next((p.value for p in decoded.parameters if isinstance(p.value, VersionInformation)), None)
    values = ParamSet.from_decoded(decoded).as_sent()
    extra = {p.name: p.value for p in decoded.parameters if p.name == "max_datagram_frame_size"}
    return HandshakeTraits(
        order=order_signature(decoded.ids),
        grease=str(grease),
        encoding=long_encodings(decoded.raw),
        cid_length=len(cid) if isinstance(cid, bytes) else None,
        version_information=(" ".join(f"0x{v:08x}" for v in version_information.available_versions)
                             if version_information is not None else None),
        retry=("none" if not retry else f"token {retry_token_length} bytes" if retry_token_length is not None
               else "token unknown"),
        values={name: value for name, value in {**values, **extra}.items() if name in TIE_BREAK_VALUES},
    )


def long_encodings(raw: bytes) -> tuple[str, ...]:
    """Varints of the extension encoded in more bytes than their value needs (RFC 9000
    allows any length; a serialiser that pads does so always). Flow-control values are
    left out: how long they are depends on what the operator set."""
    found: list[str] = []
    offset = 0
    while offset < len(raw):
        try:
            start = offset
            param_id, offset = decode_varint(raw, offset)
            id_size = offset - start
            start = offset
            length, offset = decode_varint(raw, offset)
            length_size = offset - start
        except ValueError:
            break
        token = "G" if is_grease(param_id) else f"{param_id:02x}"
        if id_size > len(encode_varint(param_id)):
            found.append(f"id {token} in {id_size} bytes")
        if length_size > len(encode_varint(length)):
            found.append(f"length of {token} in {length_size} bytes")
        value = raw[offset:offset + length]
        offset += length
        if spec_for(param_id).type is ParamType.VARINT and param_id not in _FLOW_CONTROL_IDS and value:
            try:
                number, end = decode_varint(value)
            except ValueError:
                continue
            if end == len(value) and len(value) > len(encode_varint(number)):
                found.append(f"value of {token} in {len(value)} bytes")
    return tuple(found)


@dataclass(frozen=True)
class AlpnRefusal:
    """How a server answered a client whose only ALPN was ``invalid``.

    ``outcome``: 'close' (the server sent a CONNECTION_CLOSE), 'silence'
    (nothing that ended the handshake before the timeout), 'completed' (the
    server took the connection without a common ALPN) or 'other' (the client
    gave up on what the server sent).
    """

    outcome: str
    error_code: int | None = None
    frame_type: int | None = None  # None with a close: an application close (0x1d)
    reason_phrase: str | None = None

    def describe(self) -> str:
        if self.outcome != "close":
            return self.outcome
        frame = "application close" if self.frame_type is None else f"frame 0x{self.frame_type:x}"
        return f"close 0x{self.error_code:x} ({frame}) {self.reason_phrase!r}"


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
    keys: Mapping[str, tuple[object, ...]]  # HandshakeTraits.keys() name -> values seen
    refusals: tuple[str, ...]  # AlpnRefusal.describe() seen
    retry: tuple[str, ...]
    constant_values: Mapping[str, object]  # TIE_BREAK_VALUES that never varied


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
                keys={name: tuple(_frozen(v) for v in values) for name, values in entry["keys"].items()},
                refusals=tuple(entry["invalid_alpn"]),
                retry=tuple(entry["retry"]),
                constant_values=dict(entry.get("constant_values", {})),
            ))
        return cls(tuple(signatures), document.get("provenance", {}).get("learned_at"))

    @property
    def libraries(self) -> tuple[str, ...]:
        return tuple(signature.library for signature in self.signatures)


def _frozen(value: object) -> object:
    return tuple(value) if isinstance(value, list) else value


def _tokens(signature: str) -> list[str]:
    return signature.split("-") if signature else []


def _precedence(orders: Iterable[str]) -> frozenset[tuple[str, str]]:
    """Pairs (a, b) that appeared as a-before-b in some order and never b-before-a."""
    seen: set[tuple[str, str]] = set()
    for order in orders:
        tokens = _tokens(order)
        seen.update((a, b) for a, b in combinations(tokens, 2) if a != b)
    return frozenset(pair for pair in seen if (pair[1], pair[0]) not in seen)


def _order_fit(signature: LibrarySignature, observed: str) -> str | None:
    """How ``observed`` fits the library's order, or None when it rules it out."""
    tokens = _tokens(observed)
    unseen = [token for token in dict.fromkeys(tokens) if token not in signature.known_ids]
    common = len(set(tokens)) - len(unseen)
    if len(unseen) > MAX_UNSEEN_IDS or common < MIN_COMMON_IDS:
        return None
    # GREASE ('G') may appear more than once; any other id twice is no serialiser at work.
    named = [token for token in tokens if token != "G"]
    if len(set(named)) != len(named):
        return None
    note = f", ids never seen while learning: {'-'.join(unseen)}" if unseen else ""
    if signature.order_randomised:
        return f"ids fit its shuffled order{note}"
    if observed in signature.orders:
        return "order exactly as learned"
    agreements = 0
    for a, b in combinations(tokens, 2):
        if (b, a) in signature.precedence:
            return None
        agreements += (a, b) in signature.precedence
    return f"order consistent ({agreements} learned pairs agree{note})"


def classify(signatures: LibrarySignatures, traits: HandshakeTraits | None = None,
             refusal: AlpnRefusal | None = None, malformed: bool = False) -> Identification:
    """The library of one server from its completed handshake's traits (None: no
    completed handshake) and its answer to ALPN ``invalid`` (None: not asked).

    ``malformed``: the decoder had findings. No library's own serialiser emits
    a duplicate id or a broken value, so such a server is not any library as
    learned, whatever else it shows: it stays unknown.
    """
    if malformed:
        return Identification(UNKNOWN, "transport parameters malformed (decoder findings); "
                                       "no learned library serialises like this")
    if traits is None and (refusal is None or refusal.outcome != "close"):
        # Silence or a failure the client saw is what a dead or broken server shows
        # too: only a close is evidence without a completed handshake.
        return Identification(UNKNOWN, "no completed handshake" + (
            f" and the ALPN refusal ({refusal.describe()}) is no library's own" if refusal else ""))
    candidates = list(signatures.libraries)
    by_name = {s.library: s for s in signatures.signatures}
    evidence: list[str] = []

    def narrow(what: str, fits: Mapping[str, str | None]) -> None:
        nonlocal candidates
        kept = [library for library in candidates if fits.get(library) is not None]
        detail = "; ".join(f"{library}: {fits[library]}" for library in kept if fits[library])
        evidence.append(f"{what} fits {', '.join(kept) or 'no learned library'}" + (f" ({detail})" if detail else ""))
        candidates = kept

    if traits is not None:
        narrow(f"order {traits.order}", {s.library: _order_fit(s, traits.order) for s in signatures.signatures})
        for name, value in traits.keys().items():
            observed = _frozen(value)
            narrow(f"{name} {_show(observed)}",
                   {s.library: "" if observed in s.keys.get(name, ()) else None for s in signatures.signatures})
    if refusal is not None:
        described = refusal.describe()
        narrow(f"ALPN refusal {described}",
               {s.library: "" if described in s.refusals else None for s in signatures.signatures})

    if len(candidates) > 1 and traits is not None:
        scores = {library: _tie_score(by_name[library], traits) for library in candidates}
        top = max(scores.values())
        if list(scores.values()).count(top) == 1:
            winner = max(scores, key=scores.get)  # type: ignore[arg-type]
            evidence.append(f"{TIE_BROKEN}: {top} of {winner}'s learned habits match")
            candidates = [winner]
    if len(candidates) == 1:
        return Identification(candidates[0], "; ".join(evidence), tuple(candidates))
    if len(candidates) > 1:
        evidence.append(f"cannot tell {' / '.join(candidates)} apart")
    return Identification(UNKNOWN, "; ".join(evidence), tuple(candidates))


def _show(value: object) -> str:
    if isinstance(value, tuple):
        return "[" + ", ".join(map(str, value)) + "]" if value else "none longer than needed"
    return str(value)


def _tie_score(signature: LibrarySignature, traits: HandshakeTraits) -> int:
    score = sum(1 for name, value in signature.constant_values.items() if traits.values.get(name) == value)
    return score + (traits.retry in signature.retry)


def classify_decoded(signatures: LibrarySignatures, decoded: DecodedParameters | None,
                     refusal: AlpnRefusal | None = None, retry: bool = False,
                     retry_token_length: int | None = None) -> Identification:
    """``classify`` from the codec's decoding of a server's parameters."""
    if decoded is None:
        return classify(signatures, None, refusal)
    if decoded.findings:
        return classify(signatures, malformed=True)
    return classify(signatures, handshake_traits(decoded, retry, retry_token_length), refusal)


# -- learning -----------------------------------------------------------------------------

@dataclass
class ServerObservations:
    """What repeated handshakes with one lab server showed (input of learning)."""

    server: str
    library: str
    software: str  # e.g. "ngtcp2 gtlsserver 0.12.1 (Debian)"
    handshakes: list[tuple[tuple[int, ...], HandshakeTraits]] = field(default_factory=list)  # (ids, traits)
    refusals: list[AlpnRefusal] = field(default_factory=list)
    configuration: str = "default"


def learn_signatures(observations: Iterable[ServerObservations],
                     provenance: Mapping[str, object]) -> dict[str, object]:
    """The signatures document from observed handshakes: per library its orders,
    whether the order varied between connections of one server, every key
    trait seen, the invalid-ALPN refusals, Retry habits and the tie-breaking
    values that never varied."""
    by_library: dict[str, list[ServerObservations]] = {}
    for observation in observations:
        if not observation.handshakes:
            raise ValueError(f"{observation.server}: no handshake completed")
        by_library.setdefault(observation.library, []).append(observation)
    libraries: dict[str, object] = {}
    for library, servers in sorted(by_library.items()):
        orders: dict[str, dict[str, object]] = {}
        randomised = False
        keys: dict[str, list[object]] = {}
        retry: list[str] = []
        refusals: list[str] = []
        all_values = []
        for server in servers:
            randomised |= len({traits.order for _, traits in server.handshakes}) > 1
            for ids, traits in server.handshakes:
                entry = orders.setdefault(traits.order, {
                    "signature": traits.order, "fingerprint": order_fingerprint(ids), "servers": [], "handshakes": 0})
                entry["handshakes"] += 1
                if server.server not in entry["servers"]:
                    entry["servers"].append(server.server)
                for name, value in traits.keys().items():
                    if value not in keys.setdefault(name, []):
                        keys[name].append(value)
                if traits.retry not in retry:
                    retry.append(traits.retry)
                all_values.append(traits.values)
            for refusal in server.refusals:
                if refusal.describe() not in refusals:
                    refusals.append(refusal.describe())
        constant = {name: value for name, value in all_values[0].items()
                    if value is not None and all(v.get(name) == value for v in all_values)}
        libraries[library] = {
            "order_randomised": randomised,
            "orders": sorted(orders.values(), key=lambda o: o["signature"]),
            "keys": keys,
            "invalid_alpn": refusals,
            "retry": retry,
            "constant_values": dict(sorted(constant.items())),
            "servers": [{"name": s.server, "software": s.software, "configuration": s.configuration,
                         "handshakes": len(s.handshakes), "invalid_alpn_handshakes": len(s.refusals)}
                        for s in servers],
        }
    return {"format": SIGNATURES_FORMAT, "provenance": dict(provenance), "libraries": libraries}


def separations(signatures: LibrarySignatures) -> list[dict[str, object]]:
    """For every ordered pair of learned libraries (a, b): the traits of a's learning
    handshakes that keep a server of a from fitting b (its orders, each key, the
    refusal). A pair kept apart by one trait or none is where the classifier is most
    fragile: there the tie-breaking values and Retry, or that one trait, decide."""
    rows = []
    for first in signatures.signatures:
        for second in signatures.signatures:
            if first is second:
                continue
            traits = []
            if not any(_order_fit(second, order) for order in first.orders):
                traits.append("order")
            traits += [name for name in first.keys if not set(first.keys[name]) & set(second.keys.get(name, ()))]
            if not set(first.refusals) & set(second.refusals):
                traits.append("ALPN refusal")
            rows.append({"server of": first.library, "not taken for": second.library,
                         "kept apart by": ", ".join(traits), "traits": len(traits)})
    return sorted(rows, key=lambda row: (row["traits"], row["server of"], row["not taken for"]))


def feature_table(document: Mapping[str, object]) -> list[dict[str, object]]:
    """One row per library of a signatures document: its traits in words (README, notebook)."""
    rows = []
    for library, entry in document["libraries"].items():
        keys = entry["keys"]
        orders = entry["orders"]
        rows.append({
            "library": library,
            "order": "shuffled per connection" if entry["order_randomised"] else
                     " | ".join(o["signature"] for o in orders),
            "grease": " | ".join(map(str, keys["grease"])),
            "long varints": " | ".join(", ".join(e) or "none" for e in keys["encoding"]),
            "cid bytes": " | ".join(map(str, keys["cid_length"])),
            "version_information": " | ".join(str(v) for v in keys["version_information"]),
            "invalid ALPN": " | ".join(entry["invalid_alpn"]),
            "retry": " | ".join(entry["retry"]),
            "learned from": ", ".join(sorted({s["software"] for s in entry["servers"]})),
        })
    return rows

