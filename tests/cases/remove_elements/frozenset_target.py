# spec: {"op": "remove_elements", "target": "_SPEC_VERIFY_AUDITED_BACKENDS", "values": ["fa3"]}
# status: changed
"""KV cache checks."""

# Backends whose speculative verify path is audited.
_SPEC_VERIFY_AUDITED_BACKENDS = frozenset(
    {
        "triton",
        "flashinfer",
        "fa3",
    }
)

_SPEC_MHA_AUDITED_BACKENDS = frozenset({"triton", "flashinfer"})
# output
"""KV cache checks."""

# Backends whose speculative verify path is audited.
_SPEC_VERIFY_AUDITED_BACKENDS = frozenset(
    {
        "triton",
        "flashinfer",
    }
)

_SPEC_MHA_AUDITED_BACKENDS = frozenset({"triton", "flashinfer"})
