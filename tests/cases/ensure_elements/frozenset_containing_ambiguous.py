# spec: {"op": "ensure_elements", "containing": ["triton", "flashinfer"], "values": ["fa4"]}
# status: ambiguous
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
