"""bench.agentcpu's instrumented kept loaders still fit the loaders the SSH transports start
(transports/bundle.py kept_boot): each anchor it edits is there once, and the result is
Python."""

from __future__ import annotations

import pytest

from bench import agentcpu
from patcher.transports.bundle import BOOT, BOOT0, agent_key, kept_boot


@pytest.mark.parametrize("boot", [BOOT0, BOOT], ids=["stage0", "plain"])
def test_the_kept_loaders_take_the_instrumentation(boot: str) -> None:
    loader = agentcpu.kept_instrumented(kept_boot(boot, agent_key()))
    compile(loader, "<kept>", "exec")
    assert "_os._exit=_end" in loader and loader.count(";_wrap(mod)\n") == 1
    assert loader.index("l=G()") < loader.index("sys.meta_path.insert(0,F())")
