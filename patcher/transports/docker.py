"""Kind `docker`: the agent in a running docker container (patcher.transports.container),
`docker exec -i [--user U] CONTAINER` here or through SSH on the container's host."""

from __future__ import annotations

from typing import TYPE_CHECKING

from patcher.transports import container

if TYPE_CHECKING:
    from patcher.transports import Settings, Target
    from patcher.transports.pipe import PipeTransport


def make(target: Target, settings: Settings) -> PipeTransport:
    return container.make("docker", target, settings)
