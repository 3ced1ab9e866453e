"""The one method registry: every CHAP 0.3 method, its handler, and the facts
the gates, the audit log, the catalogue, MCP and the CLI read.

Protocol facts (the same for every coordinator) are stated once, in
`CHAP_0_3` below: each method's owning profile, whether it is privileged
(a gated refusal of it is still recorded), whether it answers whatever
the workspace advertises, and whether it is a human's decision on reviewed
work (which MCP offers no agent, SPECIFICATION.md "MCP and A2A").

Implementation facts are declared by the profile module that implements the
method, right beside its handler::

    PROFILE = Profile("whisper/1.0")

    @PROFILE.method(
        "whisper.ask",
        floor=True,                      # the caller must be a member first
        params=schema(["workspace", "from", "to"], to=STRING, question=ANY),
        title="Ask a member privately",
        description="...",
    )
    def whisper_ask(call: Call) -> dict[str, Any]:
        ...

A profile takes part in calls it does not own, and in sweeps, through hooks
its `Profile` declares: `before_write` / `after_write` (around the handler
of every write where the profile is advertised), `verify_sender` and
`before_gate` (checks every call passes while a coordinator option turns
them on: dispatch steps 10 and 11), and `on_sweep` (the decisions time
alone makes due). The pipeline knows profiles only through these.

`Registry(profiles)` joins the declarations with the protocol facts. It
raises RegistryError when a name is declared twice (a profile may span
several modules, as core/1.0 does), when a name is not a
CHAP 0.3 method, or when a module declares another profile's method (only a
method that answers whatever is advertised may be implemented outside its
profile, as `audit.verify_chain` is by core). A method no module declares is
unimplemented: it answers -32601. A profile is advertisable once a module
declares it and every method it owns has a handler, and, when its machinery
needs an extra (`Profile("security-signed/1.0", extra="crypto")`), where that
extra is installed; naming it elsewhere is refused with the `pip install`
that fixes it.

Extension profiles are chapline's own, outside CHAP: a profile named
`x-chapline-<name>/<version>` owns the methods it declares, each named
`x-chapline.<...>`. The prefixes keep them from ever clashing with an official
CHAP name (CHAP names never start with `x-`); they are not CHAP 0.3 methods,
so `CHAP_0_3` and the "every CHAP method" checks never see them
(`Method.extension` marks them).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from coordinator.engine.glossary import described
from coordinator.engine.wire import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    SIG_KEY_NOT_FOUND,
    SIG_KEY_REVOKED,
    SIG_ROTATION_KEY_MISMATCH,
    SIG_VERIFY_FAILED,
    STORED_OBJECT_UNREADABLE,
)
from coordinator.errors import RegistryError
from coordinator.extras import installed

if TYPE_CHECKING:
    from coordinator.engine.call import Call
    from coordinator.engine.sweeps import Sweep

__all__ = [
    "ANY",
    "ARRAY",
    "BOOLEAN",
    "CHAP_0_3",
    "EXTENSION_METHOD_PREFIX",
    "EXTENSION_PROFILE_PREFIX",
    "FROM",
    "INTEGER",
    "JSON_VALUE",
    "OBJECT",
    "OPEN_OBJECT",
    "PROFILES_0_3",
    "STRING",
    "WORKSPACE",
    "CallCheck",
    "Handler",
    "Method",
    "Profile",
    "Registry",
    "SweepHook",
    "profile_name",
    "profile_names",
    "refusal_is_recorded",
    "schema",
]

Handler = Callable[["Call"], Any]
_H = TypeVar("_H", bound=Handler)
# A check every call passes before its handler runs (`Profile.verify_sender`, `before_gate`).
CallCheck = Callable[["Call", "Method"], None]
_C = TypeVar("_C", bound=CallCheck)
# What a profile decides in each workspace at a sweep (see `Profile.on_sweep`).
SweepHook = Callable[["Sweep"], None]
_S = TypeVar("_S", bound=SweepHook)


@dataclass(frozen=True)
class _Spec:
    profile: str
    privileged: bool = False
    always_available: bool = False
    humans_only: bool = False


def _methods(profile: str, names: str, **facts: bool) -> dict[str, _Spec]:
    return {name: _Spec(profile, **facts) for name in names.split()}


# Every method of CHAP 0.3, its owning profile, and the protocol's facts about it.
CHAP_0_3: Mapping[str, _Spec] = {
    **_methods(
        "core/1.0",
        "workspace.create participant.join participant.leave task.create task.update "
        "task.complete",
    ),
    **_methods("core/1.0", "workspace.describe audit.read", always_available=True),
    **_methods(
        "core/1.0",
        "workspace.set_profiles participant.rotate_key participant.revoke_key",
        privileged=True,
    ),
    **_methods("review/1.0", "review.request"),
    **_methods("review/1.0", "decide.approve decide.reject decide.override", humans_only=True),
    **_methods("review/1.0", "abstain.declare escalate.raise"),
    **_methods("routing/1.0", "task.route review.depth escalate.auto"),
    **_methods("whisper/1.0", "whisper.ask whisper.answer"),
    **_methods(
        "deliberation/1.0", "deliberate.open deliberate.comment deliberate.vote deliberate.close"
    ),
    **_methods("handoff/1.0", "handoff.propose handoff.accept handoff.decline"),
    **_methods(
        "control/1.0",
        "control.pause control.resume control.cancel control.snapshot control.rollback "
        "control.supersede control.set_mode_ceiling",
        privileged=True,
    ),
    **_methods(
        "audit-scitt/1.0", "audit.verify_chain audit.verify_receipt", always_available=True
    ),
    **_methods("audit-scitt/1.0", "audit.submit_to_scitt"),
}

# The profiles of CHAP 0.3, those that own no method included.
PROFILES_0_3 = frozenset(
    {spec.profile for spec in CHAP_0_3.values()}
    | {"modes/1.0", "security-signed/1.0", "identity-oidc/1.0", "identity-vc/1.0"}
)


# chapline's own profiles and methods: names CHAP never uses.
EXTENSION_PROFILE_PREFIX = "x-chapline-"
EXTENSION_METHOD_PREFIX = "x-chapline."
_EXTENSION_PROFILE = re.compile(r"x-chapline-[a-z][a-z0-9-]*/[0-9]+\.[0-9]+")
_EXTENSION_METHOD = re.compile(r"x-chapline\.[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+")


@dataclass(frozen=True)
class Method:
    """Everything chapline knows about one method.

    `profile` owns the method; `implemented_by` is the profile module whose
    handler runs it (None when unimplemented). `read`: never recorded,
    accepted or refused. `floor`: the caller must be a member before anything
    else is checked (-32011). `pause_exempt`: answers in a paused workspace.
    `records_refusals`: a member's refusal is appended to the log (subject to
    the codes audit.py never records). `params` is the JSON schema of the
    params object (MCP tool input); `title`, `description` and `annotations`
    are MCP tool hints. `extension`: a chapline extension method, not CHAP's.
    `humans_only`: a human's decision on an agent's work (`decide.*`), which
    a session bound to an agent is not offered.
    """

    name: str
    profile: str
    privileged: bool = False
    always_available: bool = False
    handler: Handler | None = None
    implemented_by: str | None = None
    read: bool = False
    floor: bool = False
    pause_exempt: bool = False
    records_refusals: bool = False
    params: Mapping[str, Any] = field(default_factory=dict)
    title: str = ""
    description: str = ""
    annotations: Mapping[str, Any] = field(default_factory=dict)
    extension: bool = False
    humans_only: bool = False


# Refusals with these codes say nothing about the workspace and are never kept:
# a malformed or unparseable call, an internal or stored-object fault, and the
# signature and identity checks of -32070..-32073.
_NEVER_RECORDED_CODES = frozenset(
    {
        PARSE_ERROR,
        INVALID_REQUEST,
        INVALID_PARAMS,
        INTERNAL_ERROR,
        STORED_OBJECT_UNREADABLE,
        SIG_VERIFY_FAILED,
        SIG_KEY_NOT_FOUND,
        SIG_KEY_REVOKED,
        SIG_ROTATION_KEY_MISMATCH,
    }
)


def refusal_is_recorded(method: Method, code: int, gated: bool) -> bool:
    """Whether a refused call by a current member is appended to the log:
    never for the codes above; a -32601 only from the profile gate and for a
    privileged method; otherwise as the method declares (SPECIFICATION.md,
    "Dispatch")."""
    if code in _NEVER_RECORDED_CODES:
        return False
    if code == METHOD_NOT_FOUND:
        return gated and method.privileged
    return method.records_refusals


class Profile:
    """The methods one profile module implements, declared beside their
    handlers, and the hooks by which it takes part in other calls and in
    sweeps (the pipeline knows profiles only through these); `extra` names
    the chapline extra its handlers and checks need, if any."""

    def __init__(self, name: str, *, extra: str | None = None) -> None:
        self.extension = name.startswith(EXTENSION_PROFILE_PREFIX)
        if self.extension and not _EXTENSION_PROFILE.fullmatch(name):
            raise RegistryError(
                name, f"an extension profile is named {EXTENSION_PROFILE_PREFIX}<name>/<major>.<minor>"
            )
        if not self.extension and name not in PROFILES_0_3:
            raise RegistryError(
                name,
                f"not a CHAP 0.3 profile (chapline's own profiles are named "
                f"{EXTENSION_PROFILE_PREFIX}<name>/<version>)",
            )
        self.name = name
        self.extra = extra
        self.methods: list[Method] = []
        self.before_hooks: list[Handler] = []
        self.write_hooks: list[Handler] = []
        # (the coordinator option that turns it on, check)
        self.sender_checks: list[tuple[str, CallCheck]] = []
        self.gate_checks: list[tuple[str, CallCheck]] = []
        self.sweep_hooks: list[SweepHook] = []

    def method(
        self,
        name: str,
        *,
        read: bool = False,
        floor: bool = False,
        pause_exempt: bool = False,
        records_refusals: bool | None = None,
        params: Mapping[str, Any] | None = None,
        title: str,
        description: str,
        annotations: Mapping[str, Any] | None = None,
    ) -> Callable[[_H], _H]:
        """Declare the decorated function as the handler of `name`.

        `records_refusals` defaults to "not a read". MCP `annotations`
        default to readOnlyHint = idempotentHint = `read`.
        """
        spec = self._extension_spec(name) if self.extension else CHAP_0_3.get(name)
        if spec is None:
            raise RegistryError(
                name,
                f"not a CHAP 0.3 method (an extension profile's methods are named "
                f"{EXTENSION_METHOD_PREFIX}<...>)",
            )
        if spec.profile != self.name and not spec.always_available:
            raise RegistryError(
                name, f"owned by {spec.profile}; declare it in that profile's module"
            )

        def declare(handler: _H) -> _H:
            self.methods.append(
                Method(
                    name=name,
                    profile=spec.profile,
                    privileged=spec.privileged,
                    always_available=spec.always_available,
                    handler=handler,
                    implemented_by=self.name,
                    read=read,
                    floor=floor,
                    pause_exempt=pause_exempt,
                    records_refusals=(not read) if records_refusals is None else records_refusals,
                    params=described(params if params is not None else schema()),
                    title=title,
                    description=description,
                    annotations={"readOnlyHint": read, "idempotentHint": read, **(annotations or {})},
                    extension=self.extension,
                    humans_only=spec.humans_only,
                )
            )
            return handler

        return declare

    def before_write(self, hook: _H) -> _H:
        """Declare `hook(call)` to run before the handler of every write (of
        any profile) in a workspace advertising this profile: the handler
        sees what it stages, which lands in the same entry (or nowhere if the
        call is refused)."""
        self.before_hooks.append(hook)
        return hook

    def after_write(self, hook: _H) -> _H:
        """Declare `hook(call)` to run after the handler of every write (of any
        profile) in a workspace advertising this profile, before the write is
        recorded: what it stages lands in the same entry, what it raises
        refuses the call."""
        self.write_hooks.append(hook)
        return hook

    def verify_sender(self, *, enabled_by: str) -> Callable[[_C], _C]:
        """Declare `check(call, method)` to run on every call (whatever the
        workspace advertises) while the coordinator option `enabled_by` is
        on, at dispatch step 10: it checks the evidence the call carries of
        its sender before anything is evaluated; what it raises refuses the
        call, never recorded."""

        def declare(check: _C) -> _C:
            self.sender_checks.append((enabled_by, check))
            return check

        return declare

    def before_gate(self, *, enabled_by: str) -> Callable[[_C], _C]:
        """Declare `check(call, method)` to run on every call (whatever the
        workspace advertises) while the coordinator option `enabled_by` is
        on, at dispatch step 11, before the profile gate: what it raises
        refuses the call, recorded as a member's refusal is."""

        def declare(check: _C) -> _C:
            self.gate_checks.append((enabled_by, check))
            return check

        return declare

    def on_sweep(self, hook: _S) -> _S:
        """Declare `hook(sweep)` to run in every held workspace at each
        `Coordinator.sweep()` (whatever it advertises: the hook decides),
        to make the decisions that time alone has made due. It reads and
        writes through its `engine.sweeps.Sweep`, and reports there what it
        did. A store conflict it raises is left for the next sweep."""
        self.sweep_hooks.append(hook)
        return hook

    def _extension_spec(self, name: str) -> _Spec:
        """An extension profile owns the methods it declares, all namespaced."""
        if not _EXTENSION_METHOD.fullmatch(name):
            raise RegistryError(
                name,
                f"an extension method is named {EXTENSION_METHOD_PREFIX}<group>.<verb> "
                "(lower case)",
            )
        return _Spec(self.name)


class Registry:
    """Every CHAP 0.3 method: declared ones with their handlers, the rest
    unimplemented, and the profiles' hooks. `coordinator.profiles.REGISTRY`
    is built from every profile module; a `Coordinator(registry=...)` runs
    the profiles of the one it is given."""

    def __init__(self, profiles: Iterable[Profile]) -> None:
        profiles = list(profiles)
        declared: dict[str, Method] = {}
        modules: dict[str, Profile] = {}
        for profile in profiles:
            # A profile may be implemented across several modules (core is).
            modules.setdefault(profile.name, profile)
            for method in profile.methods:
                if method.name in declared:
                    raise RegistryError(
                        method.name,
                        f"declared twice (by {declared[method.name].implemented_by} "
                        f"and {method.implemented_by})",
                    )
                declared[method.name] = method
        self._methods: dict[str, Method] = {
            name: declared.get(name)
            or Method(
                name, spec.profile, spec.privileged, spec.always_available, humans_only=spec.humans_only
            )
            for name, spec in CHAP_0_3.items()
        }
        self._extensions = {n: m for n, m in declared.items() if m.extension}
        owned: dict[str, list[Method]] = {}
        for method in [*self._methods.values(), *self._extensions.values()]:
            owned.setdefault(method.profile, []).append(method)
        # profile name -> the extra it needs, when that is not installed here
        self._missing_extra: dict[str, str] = {
            profile_name(p.name): p.extra
            for p in profiles
            if p.extra is not None and not installed(p.extra)
        }
        self.advertisable: tuple[str, ...] = tuple(
            sorted(
                (
                    name
                    for name in modules
                    if all(m.handler for m in owned.get(name, []))
                    and profile_name(name) not in self._missing_extra
                ),
                key=lambda p: (p != "core/1.0", p),
            )
        )
        self._advertisable_names = frozenset(profile_name(p) for p in self.advertisable)
        # (profile name, hook): run before / after writes where that profile is advertised.
        self.before_hooks: tuple[tuple[str, Handler], ...] = tuple(
            (profile_name(p.name), hook) for p in profiles for hook in p.before_hooks
        )
        self.write_hooks: tuple[tuple[str, Handler], ...] = tuple(
            (profile_name(p.name), hook) for p in profiles for hook in p.write_hooks
        )
        # (option, check): run on every call while that option is on.
        self.sender_checks: tuple[tuple[str, CallCheck], ...] = tuple(
            check for p in profiles for check in p.sender_checks
        )
        self.gate_checks: tuple[tuple[str, CallCheck], ...] = tuple(
            check for p in profiles for check in p.gate_checks
        )
        # (profile name, hook): run in every held workspace at a sweep.
        self.sweep_hooks: tuple[tuple[str, SweepHook], ...] = tuple(
            (profile_name(p.name), hook) for p in profiles for hook in p.sweep_hooks
        )

    def get(self, name: str) -> Method | None:
        """The method named `name`, or None if neither CHAP 0.3 nor a declared
        extension profile has one."""
        return self._methods.get(name) or self._extensions.get(name)

    def methods(self) -> list[Method]:
        """Every CHAP 0.3 method, implemented or not (no extension method)."""
        return list(self._methods.values())

    def extension_methods(self) -> list[Method]:
        """chapline's own methods, from its extension profiles."""
        return list(self._extensions.values())

    def implemented(self) -> list[Method]:
        """The CHAP methods that have a handler (the MCP tool list; the
        extension methods are `extension_methods()`)."""
        return [m for m in self._methods.values() if m.handler is not None]

    def unadvertisable(self, profiles: Iterable[str]) -> str | None:
        """What is wrong with advertising `profiles` here, or None when every
        one is advertisable (names match in any version)."""
        missing = [p for p in profiles if profile_name(p) not in self._advertisable_names]
        if not missing:
            return None
        uninstalled = [
            (p, self._missing_extra[profile_name(p)])
            for p in missing
            if profile_name(p) in self._missing_extra
        ]
        if uninstalled:
            return "; ".join(
                f"{p} needs chapline[{extra}], which is not installed here: "
                f"pip install 'chapline[{extra}]'"
                for p, extra in uninstalled
            )
        return (
            f"{', '.join(missing)} not implemented by chapline; it implements "
            f"{', '.join(self.advertisable)}"
        )


def profile_name(profile: str) -> str:
    """`review/1.0` -> `review`: gating matches names, any version."""
    return profile.split("/", 1)[0]


@functools.lru_cache(maxsize=256)
def _names(profiles: tuple[str, ...]) -> frozenset[str]:
    return frozenset(profile_name(p) for p in profiles)


def profile_names(profiles: list[str]) -> frozenset[str]:
    """The profile names a workspace advertises (cached: every gated call asks)."""
    return _names(tuple(profiles))


# Parameter schemas (JSON Schema) for declarations.
STRING: Mapping[str, Any] = {"type": "string"}
INTEGER: Mapping[str, Any] = {"type": "integer"}
BOOLEAN: Mapping[str, Any] = {"type": "boolean"}
OBJECT: Mapping[str, Any] = {"type": "object"}
# An object with any members (a task's input, a key), as 0.3.3's schemas say it.
OPEN_OBJECT: Mapping[str, Any] = {"type": "object", "additionalProperties": True}
ARRAY: Mapping[str, Any] = {"type": "array"}
ANY: Mapping[str, Any] = {}
# Any JSON value, said as a type (artefacts, outputs, patch values): clients
# that fill arguments from a schema need a type to go by.
JSON_VALUE: Mapping[str, Any] = {"type": ["object", "array", "string", "number", "boolean", "null"]}
WORKSPACE: Mapping[str, Any] = {"type": "string", "description": "The workspace id."}
FROM: Mapping[str, Any] = {"type": "string", "description": "The caller's participant URI."}


def schema(required: Iterable[str] = (), /, **properties: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON schema of a params object. `workspace` and `from` get their
    usual schemas when named in `required` without one; a property spelled
    with a trailing underscore (`from_`) is the name without it."""
    props: dict[str, Any] = {}
    for name in required:
        if name == "workspace":
            props[name] = dict(WORKSPACE)
        elif name == "from":
            props[name] = dict(FROM)
    for name, prop in properties.items():
        props[name.rstrip("_")] = dict(prop)
    required = list(required)
    unknown = [name for name in required if name not in props]
    if unknown:
        raise RegistryError(", ".join(unknown), "required but given no schema")
    out: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        out["required"] = required
    return out
