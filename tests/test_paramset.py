"""ParamSet views, fingerprints and the built-in parameter-set files."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tparams.codec import decode_transport_parameters, encode_transport_parameters
from tparams.errors import ToolError
from tparams.paramset import (
    PERFORMANCE_PARAMETERS,
    RFC9000_DEFAULTS,
    ParamSet,
    order_fingerprint,
    order_signature,
)
from tparams.setfile import document_for, paramset_from_document

ROOT = Path(__file__).resolve().parent.parent
SETS = ROOT / "datasets" / "sets"
SCHEMA = json.loads((ROOT / "schemas" / "paramset.schema.json").read_text())

values = {
    name: (st.none() | st.booleans())
    if name == "disable_active_migration"
    else (st.none() | st.integers(0, 2**62 - 1))
    for name in PERFORMANCE_PARAMETERS
}


@given(st.fixed_dictionaries(values))
def test_a_set_survives_the_wire(mapping):
    params = ParamSet.from_mapping(mapping)
    wire = encode_transport_parameters(params.transport_parameters())
    back = ParamSet.from_decoded(decode_transport_parameters(wire))
    # disable_active_migration=False cannot be sent: on the wire it is "not sent".
    expected = params if params.disable_active_migration is not False else params.with_overrides(
        disable_active_migration=None
    )
    assert back == expected
    assert back.effective() == params.effective()


def test_as_sent_keeps_absence_and_effective_fills_rfc9000_defaults():
    params = ParamSet(initial_max_data=196608, max_ack_delay=20)
    assert params.as_sent()["initial_max_stream_data_uni"] is None
    effective = params.effective()
    assert effective["initial_max_data"] == 196608 and effective["max_ack_delay"] == 20
    assert effective["ack_delay_exponent"] == 3 and effective["active_connection_id_limit"] == 2
    assert effective["max_udp_payload_size"] == 65527
    assert set(RFC9000_DEFAULTS) == set(PERFORMANCE_PARAMETERS)


def test_fingerprint_is_stable_and_tells_absent_from_default():
    a = ParamSet(max_ack_delay=25)
    assert a.fingerprint() == ParamSet.from_mapping({"max_ack_delay": "25"}).fingerprint()
    assert a.fingerprint() != ParamSet().fingerprint()
    assert a.effective() == ParamSet().effective()
    # Pinned value: changing the canonical form silently would split every stored set.
    assert ParamSet(initial_max_data=196608).fingerprint() == "60a31487709a0fd5"


def test_order_fingerprint_ignores_grease_ids_but_not_their_position():
    assert order_signature([4, 27, 0x11]) == "04-G-11"
    assert order_fingerprint([4, 27, 0x11]) == order_fingerprint([4, 27 + 31 * 99, 0x11])
    assert order_fingerprint([4, 27, 0x11]) != order_fingerprint([27, 4, 0x11])
    assert order_fingerprint([4, 0x11]) != order_fingerprint([0x11, 4])


@pytest.mark.parametrize(
    "bad",
    [{"initial_max_dat": 1}, {"initial_max_data": -1}, {"initial_max_data": "lots"},
     {"disable_active_migration": "maybe"}, {"max_ack_delay": True}, {"initial_max_data": 2**62}],
)
def test_bad_values_are_one_line_tool_errors(bad):
    with pytest.raises(ToolError) as info:
        ParamSet.from_mapping(bad)
    assert "\n" not in str(info.value)


def test_overrides_accept_command_line_spellings():
    base = ParamSet(initial_max_data=15728640)
    assert base.with_overrides(initial_max_data="196608").initial_max_data == 196608
    assert base.with_overrides(initial_max_data="0x30000").initial_max_data == 196608
    assert base.with_overrides(disable_active_migration="true").disable_active_migration is True


def test_builtin_sets_validate_and_load():
    names = {path.stem for path in SETS.glob("*.json")}
    assert {"chrome-109", "firefox-109", "lsquic-client-default", "lsquic-server-default",
            "alpha", "beta", "config3", "config4"} <= names
    for path in SETS.glob("*.json"):
        document = json.loads(path.read_text())
        jsonschema.validate(document, SCHEMA)
        assert document["name"] == path.stem
        params = paramset_from_document(document)
        assert document_for(document["name"], document["role"], params, document["provenance"],
                            document["description"])["parameters"] == document["parameters"]


def test_builtin_sets_match_the_published_tables():
    firefox = paramset_from_document(json.loads((SETS / "firefox-109.json").read_text()))
    chrome = paramset_from_document(json.loads((SETS / "chrome-109.json").read_text()))
    beta = paramset_from_document(json.loads((SETS / "beta.json").read_text()))
    assert firefox.initial_max_stream_data_bidi_local == 12582912
    assert chrome.initial_max_stream_data_bidi_local == 6291456
    assert firefox.max_udp_payload_size is None and firefox.effective()["max_udp_payload_size"] == 65527
    assert beta.initial_max_data == 196608 and beta.initial_max_streams_uni == 103
