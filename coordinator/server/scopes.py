"""What one bearer token may do: its scopes (SPECIFICATION.md, "Authorisation").

A `Grant` names the workspaces a token reaches (a list, or all), the highest
role it may take in them, and whether it may create workspaces. chapline
tokens keep theirs in the token table (`chapline token create --workspace ID
--max-role ROLE --may-create`); an OIDC access token carries its in a claim
(`serve --oidc-scope-claim`). What is not granted is refused: a new token
reaches nothing it was not given, and an OIDC token without the claim reaches
no workspace.

Roles are CHAP's free-form strings. chapline orders four of them,
observer < participant < reviewer < admin; a token may take its highest
role, any role below it on that ladder, and (when its highest role is admin)
any role at all. A role off the ladder (`drafter`) is taken only by a token
whose highest role names it, or by an admin token.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from coordinator.errors import ScopeError

__all__ = ["ADMIN", "ALL", "DEFAULT_MAX_ROLE", "LADDER", "Grant"]

ALL = "*"
ADMIN = "admin"
LADDER = ("observer", "participant", "reviewer", ADMIN)
# CHAP's default role for a join that names none.
DEFAULT_MAX_ROLE = "participant"

_NAME = re.compile(r"[^\s,*]+")


@dataclass(frozen=True)
class Grant:
    """The scopes of one token. `workspaces` None means every workspace.

    The defaults are the fail-closed ones: no workspace, at most
    participant, no creating."""

    workspaces: frozenset[str] | None = frozenset()
    max_role: str = DEFAULT_MAX_ROLE
    may_create: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.max_role, str) or not _NAME.fullmatch(self.max_role):
            raise ScopeError("max_role", f"{self.max_role!r} is not a role name (one word, such as reviewer)")
        if self.workspaces is not None:
            for wid in self.workspaces:
                if not isinstance(wid, str) or not _NAME.fullmatch(wid):
                    raise ScopeError("workspaces", f"{wid!r} is not a workspace id (such as wsp_reports)")

    @classmethod
    def of(cls, workspaces: Iterable[str] | None, max_role: str = DEFAULT_MAX_ROLE,
           may_create: bool = False) -> Grant:
        """A grant from plain values: `workspaces` None (or holding `*`) for all."""
        ids = None if workspaces is None else list(workspaces)
        every = ids is None or ALL in ids
        return cls(None if every else frozenset(ids or ()), max_role, may_create)

    @classmethod
    def everything(cls) -> Grant:
        """What a token made before tokens had scopes may do: every
        workspace, any role, creating included (SPECIFICATION.md, "Authorisation")."""
        return cls(None, ADMIN, True)

    def covers(self, workspace: str) -> bool:
        """Whether the token reaches `workspace`."""
        return self.workspaces is None or workspace in self.workspaces

    def may_take(self, role: str) -> bool:
        """Whether the token may act in `role` (join as it, or call what it may)."""
        if role == self.max_role or self.max_role == ADMIN:
            return True
        if role in LADDER and self.max_role in LADDER:
            return LADDER.index(role) < LADDER.index(self.max_role)
        return False

    def describe(self) -> str:
        """One line for `chapline token list`."""
        where = ALL if self.workspaces is None else (",".join(sorted(self.workspaces)) or "-")
        create = "may-create" if self.may_create else "no-create"
        return f"workspaces={where} max-role={self.max_role} {create}"

    def as_json(self) -> dict[str, Any]:
        return {
            "workspaces": ALL if self.workspaces is None else sorted(self.workspaces),
            "max_role": self.max_role,
            "may_create": self.may_create,
        }

    # -- the token table's columns --------------------------------------------

    def columns(self) -> tuple[str, str, int]:
        """(workspaces, max_role, may_create) as the token table stores them:
        `*` or a JSON array of ids, the role, 0 or 1."""
        where = ALL if self.workspaces is None else json.dumps(sorted(self.workspaces))
        return where, self.max_role, int(self.may_create)

    @classmethod
    def from_columns(cls, workspaces: Any, max_role: Any, may_create: Any) -> Grant:
        """The grant a token row stores; ScopeError for a row no chapline wrote."""
        if workspaces == ALL:
            ids: list[str] | None = None
        else:
            try:
                ids = json.loads(workspaces)
            except (TypeError, ValueError):
                raise ScopeError("workspaces", f"the stored value {workspaces!r} is not * or a JSON array") from None
            if not isinstance(ids, list):
                raise ScopeError("workspaces", f"the stored value {workspaces!r} is not * or a JSON array")
        return cls.of(ids, max_role, bool(may_create))

    # -- an OIDC access token's claim -----------------------------------------

    @classmethod
    def from_claim(cls, name: str, value: Any) -> Grant:
        """The grant an OIDC token's claim `name` carries; absent (None) is
        the fail-closed default. The claim is either an object
        `{workspaces: [ids] | "*", max_role, may_create}` (each key optional)
        or a space-separated string (an OAuth `scope`) of `workspace:ID`,
        `workspace:*`, `role:NAME` and `create`, other words ignored (the
        claim may serve other APIs too)."""
        if value is None:
            return cls()
        if isinstance(value, str):
            return cls._from_words(name, value.split())
        if not isinstance(value, dict):
            raise ScopeError(name, "must be an object {workspaces, max_role, may_create} or a "
                                   "space-separated string of workspace:ID, role:NAME and create")
        workspaces = value.get("workspaces", [])
        if workspaces == ALL:
            workspaces = None
        elif not isinstance(workspaces, list) or not all(isinstance(w, str) for w in workspaces):
            raise ScopeError(f"{name}.workspaces", 'must be "*" or an array of workspace ids')
        max_role = value.get("max_role", DEFAULT_MAX_ROLE)
        may_create = value.get("may_create", False)
        if not isinstance(may_create, bool):
            raise ScopeError(f"{name}.may_create", "must be true or false")
        return cls.of(workspaces, max_role, may_create)

    @classmethod
    def _from_words(cls, name: str, words: list[str]) -> Grant:
        workspaces = [w.removeprefix("workspace:") for w in words if w.startswith("workspace:")]
        roles = [w.removeprefix("role:") for w in words if w.startswith("role:")]
        if len(roles) > 1:
            raise ScopeError(name, f"names {len(roles)} roles ({', '.join(roles)}); name the highest one only")
        return cls.of(workspaces, roles[0] if roles else DEFAULT_MAX_ROLE, "create" in words)
