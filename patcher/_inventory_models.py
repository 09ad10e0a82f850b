"""The pydantic models of a hosts.toml inventory (patcher.inventory), in their own module so
that a run without --inventory neither imports pydantic for them nor builds them."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from patcher import sshconfig

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@\[\]-]{0,199}$")


class _Fields(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    user: str | None = None
    port: int | None = Field(default=None, ge=1, le=65535)
    python: str | None = None
    identity: str | None = None
    sudo: bool | None = None

    @field_validator("user")
    @classmethod
    def _user(cls, v: str | None) -> str | None:
        problem = sshconfig.user_problem(v) if v is not None else None
        if problem:
            raise ValueError(f"user name {problem}")
        return v


class _Host(_Fields):
    name: str
    address: str
    groups: list[str] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError("name must be letters, digits and . _ - : @ (no spaces)")
        return v

    @field_validator("address")
    @classmethod
    def _address(cls, v: str) -> str:
        """Checked like a --host: `ssh -G` may hand it to ssh_config `Match exec` commands."""
        problem = sshconfig.host_problem(v)
        if problem:
            raise ValueError(f"host name {problem}")
        return v


class _Inventory(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    defaults: _Fields = Field(default_factory=_Fields)
    host: list[_Host] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> _Inventory:
        seen: set[str] = set()
        for h in self.host:
            if h.name in seen:
                raise ValueError(f"host name {h.name!r} appears twice")
            seen.add(h.name)
        return self
