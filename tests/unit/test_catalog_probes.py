"""Issue 5, item 6: every probe in patches/ is tested both ways (FAILS unpatched, PASSES patched).

The both-ways runs themselves are in tests/integration/test_vllm_local.py and
test_vllm_backport.py (real vLLM wheels, one row per edit variant, listed in
tests/support/catalog.py). This guard keeps that true as the catalog grows: a new spec, or a
new variant of an existing one, without a row there fails here, in the fast unit suite.
"""

from __future__ import annotations

from packaging.version import Version

from patcher.specs.catalog import catalog_dir
from patcher.specs.model import load_spec
from tests.conftest import REPO
from tests.support.catalog import BOTH_WAYS


def test_every_catalog_spec_has_a_probe_tested_both_ways() -> None:
    specs = sorted((REPO / catalog_dir()).glob("*.toml"))
    assert specs, "empty catalog"
    for path in specs:
        spec = load_spec(path)
        # A spec that only proves "the file changed" is what issue 5 calls lying by omission.
        assert spec.probe, f"{path.name}: a catalog spec needs a [[probe]] that fails unpatched"
        assert spec.id in BOTH_WAYS, (
            f"{path.name} has no both-ways test: add one under tests/integration/ and its "
            "releases to tests/support/catalog.py (probes FAIL on the pristine files, PASS on "
            "the patched ones)"
        )
        for i, variant in enumerate(spec.variant):
            if variant.upstream is not None:
                continue
            rows = [v for v in BOTH_WAYS[spec.id] if variant.specifier.contains(Version(v))]
            assert rows, f"{path.name}: variant[{i}] ({variant.versions}) has no both-ways row"
