"""Every id and name pattern matches the whole value (issue 24): `re.match` with a `$` pattern
accepts a trailing newline, which then reaches a journal id, a unit file's path, a host name."""

from __future__ import annotations

from pathlib import Path

import pytest

from patcher.commands import hooks
from patcher.errors import InputError, SpecError
from patcher.inventory import targets
from patcher.specs import catalog, names
from patcher.specs.model import load_spec
from patcher.transports import ssh
from tests.support.standin_specs import SPEC_A


@pytest.mark.parametrize(
    ("field", "good", "bad"),
    [
        ("id", 'id = "servekit-kimi"', 'id = "servekit-kimi\\n"'),
        ("package", 'package = "servekit"', 'package = "servekit\\n"'),
        ("scope", 'scope = "SpecConfig.verify"', 'scope = "SpecConfig.verify\\n"'),
        ("module", 'module = "servekit.config"', 'module = "servekit.config\\n"'),
    ],
)
def test_a_spec_field_with_a_trailing_newline_is_refused(
    tmp_path: Path, field: str, good: str, bad: str
) -> None:
    text = SPEC_A
    assert good in text, field
    p = tmp_path / "servekit-kimi.toml"
    p.write_text(text)
    load_spec(p)
    p.write_text(text.replace(good, bad))
    with pytest.raises(SpecError):
        load_spec(p)


def test_ids_names_units_and_targets_are_whole_matches(tmp_path: Path) -> None:
    assert names.ID.fullmatch("servekit-kimi") and not names.ID.fullmatch("servekit-kimi\n")
    # a journal id for rollback/verify by id: a trailing newline is no id
    with pytest.raises(SpecError):
        catalog.load_or_ids(["no-such-spec\n"])
    assert catalog.load_or_ids(["no-such-spec"]) == ([], ["no-such-spec"])
    assert hooks._unit_name("vllm.service") == "vllm"
    with pytest.raises(InputError):
        hooks._unit_name("vllm\n")
    assert ssh.parse_target("gpu-01")[1] == "gpu-01"
    with pytest.raises(InputError):
        ssh.parse_target("gpu-01\n")
    inv = tmp_path / "hosts.toml"
    inv.write_text("[[host]]\nname = 'h1'\naddress = '127.0.0.1'\n")
    assert targets.load_inventory(str(inv), {}).hosts
    inv.write_text("[[host]]\nname = \"h1\\n\"\naddress = '127.0.0.1'\n")
    with pytest.raises(InputError):
        targets.load_inventory(str(inv), {})
