"""Any byte string handed to the header parser gives a result or an Eagle3Error, never a crash."""

from __future__ import annotations

import json
import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from eagle3kit.checkpoint.io.safetensors_io import parse_header
from eagle3kit.core.errors import Eagle3Error

_entry = st.fixed_dictionaries(
    {},
    optional={
        "dtype": st.one_of(
            st.sampled_from(["F32", "BF16", "I64", "BOOL", "F8_E4M3", "X9"]),
            st.integers(),
            st.none(),
        ),
        "shape": st.one_of(
            st.lists(st.integers(-2, 6), max_size=3),
            st.text(max_size=3),
            st.lists(st.booleans(), max_size=2),
        ),
        "data_offsets": st.one_of(
            st.lists(st.integers(-4, 80), min_size=0, max_size=3), st.none(), st.floats()
        ),
    },
)
_header = st.one_of(
    st.dictionaries(st.text(max_size=5), _entry, max_size=4),
    st.lists(st.integers(), max_size=2),
    st.text(max_size=4),
)


@settings(max_examples=300, deadline=None)
@given(header=_header, data_len=st.integers(0, 96), lie=st.integers(-8, 8))
def test_structured_headers(header, data_len, lie):
    h = json.dumps(header).encode()
    raw = struct.pack("<Q", max(0, len(h) + lie)) + h + b"\0" * data_len
    try:
        out = parse_header(raw, len(raw), "f.safetensors")
    except Eagle3Error as e:
        assert str(e).startswith("f.safetensors: ")
        return
    end = len(raw) - (8 + len(h))
    for t in out.values():  # what is accepted is consistent
        assert 0 <= t.start <= t.end and t.end - (8 + len(h)) <= end


@settings(max_examples=300, deadline=None)
@given(raw=st.binary(max_size=64))
def test_random_bytes(raw):
    try:
        parse_header(raw, len(raw), "f.safetensors")
    except Eagle3Error:
        pass
