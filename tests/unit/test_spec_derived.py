"""What a spec derives from its fields (digest, version ranges parsed, modules, the variant a
version picks) is computed once per spec object, and is always what its fields say: equal to
a fresh spec's, left out of what the spec objects compare and dump, and computed again by a
copy whose fields `copy_with` changed."""

from __future__ import annotations

from patcher.specs.model import PatchSpec, as_json, copy_with, from_data, toml_loads
from tests.support.standin_specs import SPEC_A


def _spec() -> PatchSpec:
    return from_data(toml_loads(SPEC_A))


def test_derived_values_are_the_fields_and_are_kept() -> None:
    spec, fresh = _spec(), _spec()
    digest, specifier = spec.digest, spec.variant[0].specifier
    assert spec.digest is digest and spec.variant[0].specifier is specifier  # kept
    assert spec.variant[0].modules == ["servekit.config"]
    assert spec.variant[0].modules is not spec.variant[0].modules  # the caller's own list
    assert spec.choose_variant("1.0.0") == (0, spec.variant[0])
    assert spec.choose_variant("0.9") is None and spec.choose_variant("not a version") is None
    assert spec.choose_variant("1.0.0") == (0, spec.variant[0])  # asked again: the same
    # what the objects compare, dump and hash for the journal is the fields alone
    assert spec == fresh
    assert as_json(spec) == as_json(fresh)
    assert "digest" not in as_json(spec) and "specifier" not in as_json(spec.variant[0])
    assert digest == fresh.digest


def test_a_copy_with_other_fields_derives_its_own() -> None:
    """A copy made with `update` (as `vpatch fits` widens a variant's range) must not keep the
    original's digest or its choices: the rewrite cache and the journal key on the digest."""
    spec = _spec()
    before = (spec.digest, spec.variant[0].specifier, spec.choose_variant("0.5"))
    assert before[2] is None  # outside ">=1.0"
    wide = copy_with(spec, variant=[copy_with(spec.variant[0], versions=">=0")])
    assert wide.digest != before[0]
    assert wide.digest == from_data(as_json(wide)).digest
    assert wide.choose_variant("0.5") == (0, wide.variant[0])
    assert str(wide.variant[0].specifier) == ">=0"
    assert spec.digest == before[0] and spec.choose_variant("0.5") is None  # the original's
