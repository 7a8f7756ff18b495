"""Which QUIC library a server runs, from what it sent (pure; no I/O).

The method of the QUIC Hunter study (IMC 2023), widened: libraries serialise
their transport parameters in an order of their own (or shuffle it on every
connection), and answer a client that offers only an unknown ALPN
(``invalid``) in a way of their own. Beside those two, a completed handshake
shows habits no application sets: where and how GREASE parameters go, which
integers are encoded longer than needed, whether version_information is sent,
which parameters are sent even at their RFC 9000 default and which private
ones always come along, and (netty) a Retry on every connection. Every trait
is learned from real servers (``learn_signatures``; the data file is
datasets/library_signatures.json) and never written by hand.

A library is named when it alone fits every habit observed (*keys*); a habit
it never showed while learning rules it out. What an application chooses
never does: the connection-ID length, the versions listed, the idle timeout
and other values, datagrams, migration, Retry. Those are *soft* evidence:
the verdict's evidence says where they differ from what was learned, and
they never pick between libraries. When the keys leave several libraries,
the answer is that set (``quic-go|x/net/quic``), not a guess; when they
leave none, ``unknown``.

Matching the order: a server only sends the parameters its configuration
needs (ngtcp2 leaves out a default ``max_ack_delay``), so an observed order is
matched against the *precedence* the library showed in every learning
handshake (id a before id b), not only against the exact sequences seen. An
order that puts any learned pair the other way round rules the library out.
Registered parameters never seen while learning (a preferred_address, a
max_datagram_frame_size, retry_source_connection_id) may come anywhere: an
application turns them on. A private parameter never seen rules it out. A
library whose order varied between connections of one server during learning
is marked randomised; it is matched on the set of ids instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import combinations

from tparams.codec import DecodedParameters, VersionInformation
from tparams.paramset import PERFORMANCE_PARAMETERS, RFC9000_DEFAULTS, ParamSet, order_fingerprint, order_signature
from tparams.registry import ParamType, id_for, is_grease, spec_for
from tparams.varint import decode_varint, encode_varint

UNKNOWN = "unknown"
CANDIDATE_SEPARATOR = "|"  # a verdict naming several candidates: "quic-go|x/net/quic"
SIGNATURES_FORMAT = 3

# What operators tune per deployment (the connection and stream windows and stream
# limits): never looked at.
FLOW_CONTROL = tuple(name for name in PERFORMANCE_PARAMETERS if name.startswith("initial_max_"))
# Values an application chooses: soft evidence, shown in a verdict's evidence, never deciding.
SOFT_VALUES = tuple(name for name in PERFORMANCE_PARAMETERS if name not in FLOW_CONTROL) + (
    "max_datagram_frame_size",
)
SOFT = "soft"  # evidence lines about an application's choices start with it

# Libraries whose servers send NEW_TOKEN frames after the handshake (or never do) whatever the
# application says, as read in their source: quic-go queues one on every handshake
# (connection.go, no Config switch); tquic one on every connection (Connection::new_server, no
# switch); quiche never sends one (lib.rs: "NewToken frames are never sent by quiche"), nor netty
# (quiche beneath); x/net/quic and aioquic have no code that sends one. Elsewhere the application
# decides (ngtcp2's calls ngtcp2_conn_submit_new_token, quinn's ServerConfig sets how many,
# picoquic's sends them in one lab configuration and not the other): there, soft evidence.
NEW_TOKEN_HABIT = frozenset({"quic-go", "tquic", "quiche", "netty", "x/net/quic", "aioquic"})

# Fewer ids than this in common with a library say too little about its order.
MIN_COMMON_IDS = 3

_INITIAL_SOURCE_CID = id_for("initial_source_connection_id")
_FLOW_CONTROL_IDS = frozenset(id_for(name) for name in FLOW_CONTROL)


@dataclass(frozen=True)
class HandshakeTraits:
    """What one completed handshake shows of the server's library."""

    order: str  # tparams.paramset.order_signature, GREASE as 'G'
    grease: str  # how many GREASE parameters (where: in ``order``; their lengths are random)
    encoding: tuple[str, ...]  # varints longer than needed, e.g. 'value of 04 in 4 bytes'
    # Ids sent whatever the configuration says: at their RFC 9000 default value (which
    # nothing needs sent) or private (not permanently registered).
    unprompted: tuple[str, ...]
    cid_length: int | None  # of the server's initial_source_connection_id (soft)
    version_information: str | None  # the versions the server lists as available (soft; whether sent: a key)
    retry: str  # 'none', or 'token N bytes' (soft)
    retry_tag: str | None  # the letters a Retry token starts with, if any (netty's: "netty")
    values: Mapping[str, object]  # SOFT_VALUES as sent
    # NEW_TOKEN frames before HANDSHAKE_DONE, as a count ('0', '1'); None when the client did not
    # wait for HANDSHAKE_DONE or it never came. A key for NEW_TOKEN_HABIT's libraries only.
    new_token: str | None = None

    def keys(self) -> dict[str, object]:
        """The habits (a mismatch rules a library out)."""
        return {"grease": self.grease, "encoding": list(self.encoding),
                "version_information_sent": self.version_information is not None}

    def soft(self) -> dict[str, object]:
        """The application's choices (a mismatch is only reported)."""
        return {"cid_length": self.cid_length, "version_information": self.version_information, "retry": self.retry}


def handshake_traits(decoded: DecodedParameters, retry: bool = False,
                     retry_token_length: int | None = None, retry_token: bytes | None = None,
                     new_token_lengths: list[int] | None = None) -> HandshakeTraits:
    """The traits of a server's (well-formed) transport parameters, its Retry and the NEW_TOKEN
    frames before its HANDSHAKE_DONE (``new_token_lengths``: None when not waited for)."""
    grease = sum(1 for p in decoded.parameters if is_grease(p.id))
    cid = next((p.value for p in decoded.parameters if p.id == _INITIAL_SOURCE_CID), None)
    version_information = next((p.value for p in decoded.parameters if isinstance(p.value, VersionInformation)), None)
    values = ParamSet.from_decoded(decoded).as_sent()
    extra = {p.name: p.value for p in decoded.parameters if p.name == "max_datagram_frame_size"}
    return HandshakeTraits(
        order=order_signature(decoded.ids),
        grease=str(grease),
        encoding=long_encodings(decoded.raw),
        unprompted=tuple(_token(p.id) for p in decoded.parameters
                         if not is_grease(p.id) and (spec_for(p.id).status != "permanent"
                                                     or RFC9000_DEFAULTS.get(p.name, object()) == p.value)),
        cid_length=len(cid) if isinstance(cid, bytes) else None,
        version_information=(" ".join(f"0x{v:08x}" for v in version_information.available_versions)
                             if version_information is not None else None),
        retry=("none" if not retry else f"token {retry_token_length} bytes" if retry_token_length is not None
               else "token unknown"),
        retry_tag=retry_tag(retry_token),
        values={name: value for name, value in {**values, **extra}.items() if name in SOFT_VALUES},
        new_token=None if new_token_lengths is None else str(len(new_token_lengths)),
    )


# A token whose first bytes are this many lowercase ASCII letters or more carries a name,
# not chance: 4 random bytes fall there once in ~10^4 tokens.
MIN_RETRY_TAG = 4


def retry_tag(token: bytes | None) -> str | None:
    """The lowercase ASCII letters a Retry token starts with (netty's handler writes
    "netty"), or None: most libraries' tokens are sealed bytes."""
    if not token:
        return None
    letters = len(token) - len(token.lstrip(bytes(range(ord("a"), ord("z") + 1))))
    return token[:letters].decode() if letters >= MIN_RETRY_TAG else None


def _token(param_id: int) -> str:
    """An id as ``order_signature`` writes it."""
    return order_signature([param_id])


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
    library: str  # one library, several joined by CANDIDATE_SEPARATOR, or UNKNOWN
    library_evidence: str
    candidates: tuple[str, ...] = ()


def named(candidates: Iterable[str]) -> str:
    """The verdict for the libraries that fit every key: one, their set, or unknown."""
    ordered = sorted(candidates)
    return CANDIDATE_SEPARATOR.join(ordered) if ordered else UNKNOWN


@dataclass(frozen=True)
class LibrarySignature:
    library: str
    orders: tuple[str, ...]  # order_signature strings seen while learning
    order_randomised: bool
    precedence: frozenset[tuple[str, str]]  # (a, b): a came before b in every learned order
    known_ids: frozenset[str]
    keys: Mapping[str, tuple[object, ...]]  # HandshakeTraits.keys() name -> values seen
    unprompted: frozenset[str]  # ids in HandshakeTraits.unprompted of every learning handshake
    unprompted_ever: frozenset[str]  # ... of any learning handshake
    always_retry: bool  # every learning handshake began with a Retry
    retry_tags: frozenset[str]  # HandshakeTraits.retry_tag seen
    refusals: tuple[str, ...]  # AlpnRefusal.describe() seen
    soft: Mapping[str, tuple[object, ...]]  # HandshakeTraits.soft() name -> values seen
    new_token: tuple[str, ...]  # HandshakeTraits.new_token seen (none known: empty)
    constant_values: Mapping[str, object]  # SOFT_VALUES that never varied


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
                unprompted=frozenset(entry["unprompted"]),
                unprompted_ever=frozenset(entry["unprompted_ever"]),
                always_retry=bool(entry["always_retry"]),
                retry_tags=frozenset(entry["retry_tags"]),
                refusals=tuple(entry["invalid_alpn"]),
                soft={name: tuple(values) for name, values in entry["soft"].items()},
                new_token=tuple(entry.get("new_token", ())),
                constant_values=dict(entry.get("constant_values", {})),
            ))
        return cls(tuple(signatures), document.get("provenance", {}).get("learned_at"))

    @property
    def libraries(self) -> tuple[str, ...]:
        return tuple(signature.library for signature in self.signatures)

    def without(self, library: str) -> "LibrarySignatures":
        """These signatures as if ``library`` had never been learned."""
        return LibrarySignatures(tuple(s for s in self.signatures if s.library != library), self.learned_at)


def _frozen(value: object) -> object:
    return tuple(value) if isinstance(value, list) else value


def _tokens(signature: str) -> list[str]:
    return signature.split("-") if signature else []


def _registered(token: str) -> bool:
    """A permanently registered id: any library may send it once an application asks."""
    return token != "G" and spec_for(int(token, 16)).status == "permanent"


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
    if common < MIN_COMMON_IDS or not all(_registered(token) for token in unseen):
        return None
    # GREASE ('G') may appear more than once; any other id twice is no serialiser at work.
    named_ids = [token for token in tokens if token != "G"]
    if len(set(named_ids)) != len(named_ids):
        return None
    note = f", registered ids never seen while learning: {'-'.join(unseen)}" if unseen else ""
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
        # A serialiser that sends a value nobody needs sent (the default, a private id) does so
        # always; one that never did while learning leaves it out whatever it is told.
        sent = set(_tokens(traits.order))
        narrow(f"ids sent unprompted {'-'.join(traits.unprompted) or 'none'}", {
            s.library: "" if s.unprompted <= sent and set(traits.unprompted) <= s.unprompted_ever else None
            for s in signatures.signatures})
        narrow(f"retry {traits.retry}", {
            s.library: "" if traits.retry != "none" or not s.always_retry else None for s in signatures.signatures})
        if traits.new_token is not None:
            narrow(f"NEW_TOKEN frames {traits.new_token}", {
                s.library: "" if _new_token_fits(s, traits.new_token) else None for s in signatures.signatures})
        if any(traits.retry_tag in s.retry_tags for s in signatures.signatures):
            narrow(f"Retry token starting {traits.retry_tag!r}", {
                s.library: "" if traits.retry_tag in s.retry_tags else None for s in signatures.signatures})
    if refusal is not None:
        described = refusal.describe()
        narrow(f"ALPN refusal {described}",
               {s.library: "" if described in s.refusals else None for s in signatures.signatures})
    if traits is not None:
        evidence += _soft_evidence([by_name[library] for library in candidates], traits)
    if len(candidates) > 1:
        evidence.append(f"no habit tells {' / '.join(candidates)} apart")
    return Identification(named(candidates), "; ".join(evidence), tuple(candidates))


def _new_token_fits(signature: LibrarySignature, new_token: str) -> bool:
    return (signature.library not in NEW_TOKEN_HABIT or not signature.new_token
            or new_token in signature.new_token)


def _soft_evidence(candidates: Iterable[LibrarySignature], traits: HandshakeTraits) -> list[str]:
    """Where the application's choices differ from what each candidate showed while learning."""
    lines = []
    for signature in candidates:
        unlike = [f"{name} {value}" for name, value in traits.soft().items()
                  if value is not None and value not in signature.soft.get(name, ())]
        unlike += [f"{name} {traits.values.get(name)}" for name, value in signature.constant_values.items()
                   if traits.values.get(name) != value]
        if traits.new_token is not None and signature.new_token and traits.new_token not in signature.new_token:
            unlike.append(f"NEW_TOKEN frames {traits.new_token}")
        if unlike:
            lines.append(f"{SOFT} (the application's choice, not held against it): "
                         f"{signature.library} never showed {', '.join(unlike)} while learning")
    return lines


def _show(value: object) -> str:
    if isinstance(value, tuple):
        return "[" + ", ".join(map(str, value)) + "]" if value else "none longer than needed"
    return str(value)


def classify_decoded(signatures: LibrarySignatures, decoded: DecodedParameters | None,
                     refusal: AlpnRefusal | None = None, retry: bool = False,
                     retry_token_length: int | None = None, retry_token: bytes | None = None,
                     new_token_lengths: list[int] | None = None) -> Identification:
    """``classify`` from the codec's decoding of a server's parameters."""
    if decoded is None:
        return classify(signatures, None, refusal)
    if decoded.findings:
        return classify(signatures, malformed=True)
    return classify(signatures, handshake_traits(decoded, retry, retry_token_length, retry_token,
                                                 new_token_lengths), refusal)


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
    trait seen, the ids every handshake sent unprompted, whether every one began
    with a Retry, the invalid-ALPN refusals, and (soft) the application's choices
    seen and the values that never varied."""
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
        soft: dict[str, list[object]] = {}
        unprompted: set[str] | None = None
        unprompted_ever: set[str] = set()
        refusals: list[str] = []
        all_values = []
        retries = []
        tags: set[str] = set()
        new_tokens: list[str] = []
        for server in servers:
            randomised |= len({traits.order for _, traits in server.handshakes}) > 1
            for ids, traits in server.handshakes:
                entry = orders.setdefault(traits.order, {
                    "signature": traits.order, "fingerprint": order_fingerprint(ids), "servers": [], "handshakes": 0})
                entry["handshakes"] += 1
                if server.server not in entry["servers"]:
                    entry["servers"].append(server.server)
                for seen, found in ((keys, traits.keys()), (soft, traits.soft())):
                    for name, value in found.items():
                        if value not in seen.setdefault(name, []):
                            seen[name].append(value)
                unprompted = set(traits.unprompted) if unprompted is None else unprompted & set(traits.unprompted)
                unprompted_ever |= set(traits.unprompted)
                retries.append(traits.retry != "none")
                tags |= {traits.retry_tag} if traits.retry_tag else set()
                if traits.new_token is not None and traits.new_token not in new_tokens:
                    new_tokens.append(traits.new_token)
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
            "unprompted": sorted(unprompted or ()),
            "unprompted_ever": sorted(unprompted_ever),
            "always_retry": all(retries),
            "retry_tags": sorted(tags),
            "invalid_alpn": refusals,
            "soft": soft,
            "new_token": sorted(new_tokens),
            "constant_values": dict(sorted(constant.items())),
            "servers": [{"name": s.server, "software": s.software, "configuration": s.configuration,
                         "handshakes": len(s.handshakes), "invalid_alpn_handshakes": len(s.refusals)}
                        for s in servers],
        }
    return {"format": SIGNATURES_FORMAT, "provenance": dict(provenance), "libraries": libraries}


def separations(signatures: LibrarySignatures) -> list[dict[str, object]]:
    """For every ordered pair of learned libraries (a, b): the habits of a's learning
    handshakes that keep a server of a from fitting b (its orders, each key, the ids
    sent unprompted, a Retry on every connection, the refusal). A pair kept apart by
    one habit is where the classifier is most fragile; by none, a server of a is
    named as the set of both."""
    rows = []
    for first in signatures.signatures:
        for second in signatures.signatures:
            if first is second:
                continue
            traits = []
            if not any(_order_fit(second, order) for order in first.orders):
                traits.append("order")
            traits += [name for name in first.keys if not set(first.keys[name]) & set(second.keys.get(name, ()))]
            if not second.unprompted <= first.known_ids or not first.unprompted <= second.unprompted_ever:
                traits.append("ids sent unprompted")
            if second.always_retry and not first.always_retry:
                traits.append("Retry")
            if first.retry_tags and not first.retry_tags & second.retry_tags:
                traits.append("Retry token")
            if first.new_token and not any(_new_token_fits(second, value) for value in first.new_token):
                traits.append("NEW_TOKEN")
            if not set(first.refusals) & set(second.refusals):
                traits.append("ALPN refusal")
            rows.append({"server of": first.library, "not taken for": second.library,
                         "kept apart by": ", ".join(traits), "traits": len(traits)})
    return sorted(rows, key=lambda row: (row["traits"], row["server of"], row["not taken for"]))


def feature_table(document: Mapping[str, object]) -> list[dict[str, object]]:
    """One row per library of a signatures document: its traits in words (the manual, the notebook)."""
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
            "unprompted ids": "-".join(entry["unprompted"]) or "none",
            "version_information": " | ".join(str(v) for v in entry["soft"]["version_information"]),
            "invalid ALPN": " | ".join(entry["invalid_alpn"]),
            "retry": ("every connection" if entry["always_retry"] else " | ".join(entry["soft"]["retry"]))
                     + "".join(f", token starts {tag!r}" for tag in entry["retry_tags"]),
            "NEW_TOKEN frames": " | ".join(entry.get("new_token", ())) + ("" if library in NEW_TOKEN_HABIT else " (soft)"),
            "cid bytes (soft)": " | ".join(map(str, entry["soft"]["cid_length"])),
            "learned from": ", ".join(sorted({s["software"] for s in entry["servers"]})),
        })
    return rows

