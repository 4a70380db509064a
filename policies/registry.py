"""Name -> policy class (`POLICIES`), `make`, and the doors for a user's own policies.

A user's policy is a `Policy` subclass registered with `register(cls)`, reached in one of
two ways, both loaded by this module (docs/EXTENDING.md):

* a plugin MODULE that calls `register` when imported: `hb --plugin MODULE ...` (any
  command), a grid file's `plugins = ["MODULE"]`, or `load_plugins(["MODULE"])`;
* an entry point of the group `harnessbandit.policies` in an installed distribution,
  `NAME = "package.module:Class"` (NAME = the class's `name`): loaded lazily, when NAME is
  looked up and is not registered yet, or when the registry is listed.

Worker processes see the same registry: `ablations.runner.run_many` hands every task the
plugin modules this process loaded (`loaded_plugins`), and a worker loads them first;
entry points are found by name in every process.

    from policies.registry import POLICIES, make, register
    make("harnessbandit", n_arms=6, seed=0, tau=0.1)
"""
from __future__ import annotations

import importlib
import importlib.metadata
import sys
from collections.abc import Iterator, MutableMapping

from policies.base import Policy
from policies.bandits import UCB1, DiscountedTS, Exp3S, RankPrioritised
from policies.clairvoyant import Fixed, Oracle
from policies.mixed import Mixed
from policies.published import SEC, TAC, SuccessVariance
from policies.robust import HarnessBanditRobust
from policies.scored import LearnabilityOnly, MinFusion, ProductFusion, ScoredPolicy, TransferOnly
from policies.simple import RoundRobin, Uniform
from policies.errors import UserError

#: the entry-point group an installed distribution registers its policies under
ENTRY_POINT_GROUP = "harnessbandit.policies"

_SHIPPED = (Uniform, RoundRobin, LearnabilityOnly, TransferOnly, ScoredPolicy, ProductFusion, MinFusion, Mixed,
            Exp3S, UCB1, DiscountedTS, RankPrioritised, SEC, SuccessVariance, TAC, HarnessBanditRobust, Oracle, Fixed)


class Registry(MutableMapping):
    """name -> Policy subclass: the shipped policies, those `register`ed (plugins), and the
    entry points of ENTRY_POINT_GROUP, each loaded the first time its name is looked up
    (`in`, `[]`) and all of them when the registry is listed (iteration, `len`)."""

    def __init__(self, classes=()):
        self._classes: dict[str, type[Policy]] = {}
        self._listed = False          # every entry point loaded
        for cls in classes:
            self.register(cls)

    def register(self, cls) -> type[Policy]:
        """Add a Policy subclass under its `name` (again the same class: nothing happens);
        UserError for anything else or a name taken by another class."""
        if not (isinstance(cls, type) and issubclass(cls, Policy)) or cls is Policy:
            raise UserError(f"register({cls!r}) is not allowed: expected a subclass of policies.base.Policy")
        name = cls.name
        where = f"policy class {cls.__module__}.{cls.__qualname__}"
        if not isinstance(name, str) or not name.isidentifier():
            raise UserError(f"{where} has name={name!r}: expected a "
                            "non-empty identifier (letters, digits, _), e.g. name = \"greedy_l\"")
        if name in RESERVED_NAMES:
            raise UserError(f"{where} has name={name!r}, a word hb reserves ({RESERVED_NAMES[name]}); allowed: any "
                            "other identifier")
        held = self._classes.get(name)
        if held is cls:
            return cls
        if held is not None:
            raise UserError(f"policy name={name!r} of {cls.__module__}.{cls.__qualname__} is taken by "
                            f"{held.__module__}.{held.__qualname__}; give the policy another name")
        for knob, spec in cls.KNOBS.items():      # every default inside its own range, or no run could start
            try:
                spec.check(f"policy.{knob}", spec.default)
            except UserError as exc:
                raise UserError(f"{where} (name={name!r}): the default of its knob {knob!r} breaks its own rule: "
                                f"{exc}") from None
        self._classes[name] = cls
        return cls

    def names(self) -> list[str]:
        """Every name the registry answers to, WITHOUT importing an entry point (its name is in
        the distribution's metadata): help texts and the `valid names` of error messages, so one
        broken third-party entry point does not break a command that never names it."""
        found = list(self._classes)
        if not self._listed:
            found += [ep.name for ep in _entry_points() if ep.name not in self._classes]
        return list(dict.fromkeys(found))

    # -- the mapping -----------------------------------------------------------------
    def __getitem__(self, name: str) -> type[Policy]:
        if name not in self:
            raise KeyError(name)
        return self._classes[name]

    def __contains__(self, name: object) -> bool:
        if name in self._classes:
            if name in _SHIPPED_NAMES and name not in _CHECKED_CLASH:
                _warn_clash(name)
            return True
        if not isinstance(name, str) or self._listed:
            return False
        for ep in _entry_points():
            if ep.name == name:
                self._load_entry_point(ep)
        return name in self._classes

    def __iter__(self) -> Iterator[str]:
        self._load_all()
        return iter(list(self._classes))

    def __len__(self) -> int:
        self._load_all()
        return len(self._classes)

    def __setitem__(self, name: str, cls) -> None:
        if getattr(cls, "name", None) != name:
            raise UserError(f"POLICIES[{name!r}] = {cls!r} is not allowed: a policy is registered under its "
                            "own name; call policies.registry.register(cls)")
        self.register(cls)

    def __delitem__(self, name: str) -> None:
        del self._classes[name]

    def __repr__(self) -> str:
        return f"Registry({', '.join(self._classes)})"

    # -- entry points ----------------------------------------------------------------
    def _load_all(self) -> None:
        if not self._listed:
            for ep in _entry_points():
                if ep.name not in self._classes:
                    self._load_entry_point(ep)
                elif ep.name in _SHIPPED_NAMES and ep.name not in _CHECKED_CLASH:
                    _warn_clash(ep.name)
            self._listed = True

    def _load_entry_point(self, ep) -> None:
        where = f"entry point {ep.name} = {ep.value!r} of group {ENTRY_POINT_GROUP}"
        try:
            cls = ep.load()
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - any failure of a user's import is one line naming it
            raise UserError(f"{where} cannot be loaded: {_reason(exc)}") from exc
        if not (isinstance(cls, type) and issubclass(cls, Policy)) or getattr(cls, "name", None) != ep.name:
            raise UserError(f"{where} loads {cls!r}: expected a policies.base.Policy subclass whose name is "
                            f"{ep.name!r}")
        self.register(cls)


def _entry_points():
    return importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        return f"it called sys.exit({exc.code!r}) while being imported"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


#: names no policy may take: they mean something else where policies are named
RESERVED_NAMES = {"all": "`hb sim --policy all` runs every policy"}
#: the shipped names whose entry-point clash was looked for in this process (`_warn_clash`)
_CHECKED_CLASH: set[str] = set()


def _warn_clash(name: str) -> None:
    """Once per process and name: a warning line on stderr for each installed entry point
    named like the built-in policy `name` (the built-in is used; the entry point never is)."""
    _CHECKED_CLASH.add(name)
    for ep in _entry_points():
        if ep.name == name:
            print(f"warning: entry point {ep.name} = {ep.value!r} of group {ENTRY_POINT_GROUP} is named like the "
                  f"built-in policy {name!r}: hb uses the built-in and never that entry point; rename it (and its "
                  "class's name)", file=sys.stderr)


#: the names of the policies this package ships (plugins and entry points come after them)
SHIPPED_POLICIES = tuple(cls.name for cls in _SHIPPED)
_SHIPPED_NAMES = frozenset(SHIPPED_POLICIES)
POLICIES = Registry(_SHIPPED)

#: The eight designs of the paper's comparison (SPEC §4 table + `min`); the rest are beyond the paper.
PAPER_POLICIES = ("uniform", "round_robin", "learnability", "transfer", "harnessbandit", "product", "min", "mixed")
#: the clairvoyant references (policies.clairvoyant): bounds, not designs (`Policy.reference`)
REFERENCE_POLICIES = tuple(cls.name for cls in _SHIPPED if cls.reference)

#: the published schedulers HarnessBandit is compared with (policies.published)
PUBLISHED_POLICIES = ("sec", "variance", "tac")

#: the plugin modules this process loaded (`load_plugins`), in order: what a worker loads first
_PLUGINS: list[str] = []


def register(cls: type[Policy]) -> type[Policy]:
    """Register a Policy subclass under its `name` (usable as a class decorator); the one
    public way for a plugin to add a policy. UserError for a name taken by another class."""
    return POLICIES.register(cls)


def load_plugins(modules) -> None:
    """Import each plugin module (it registers its policies with `register`). A name that is
    not a dotted module name, or a module whose import fails in any way, is a UserError
    naming it."""
    for module in modules:
        if not isinstance(module, str) or not all(part.isidentifier() for part in module.split(".")):
            raise UserError(f"plugin module {module!r} is not allowed: expected an importable dotted module name "
                            "(e.g. mypkg.policies; a file's folder goes on PYTHONPATH)")
        try:
            importlib.import_module(module)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - any failure of a user's import is one line naming it
            raise UserError(f"plugin module {module!r} cannot be imported: {_reason(exc)}") from exc
        if module not in _PLUGINS:
            _PLUGINS.append(module)


def loaded_plugins() -> list[str]:
    """The plugin modules this process loaded, in order."""
    return list(_PLUGINS)


def make(name: str, n_arms: int, seed: int = 0, **knobs) -> Policy:
    """Build a registered policy. Unknown names or knobs raise UserError listing the valid ones.

    `make("harnessbandit", n_arms=6, seed=0, tau=0.1)`; `make("mixed", n_arms=6, arms=[0, 4])`.
    """
    if name not in POLICIES:
        raise UserError(f"policy name={name!r} is unknown; valid names: {', '.join(POLICIES.names())}")
    return POLICIES[name](n_arms, seed, **knobs)
