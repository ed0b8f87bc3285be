"""The execution backends a datacenter may name, and the settings each one owns.

accounts is the base of the apps and names no backend: the app that runs jobs registers each of
its backends here when Django starts (``jobs/backends/__init__.py`` is the registry), and what a
datacenter offers comes from what was registered: the choices of ``Datacenter.backend``, the
settings its backend owns (kept in ``Datacenter.backend_settings``, a JSON object whose keys are
the backend's settings form's fields, checked by that form's rules) and the fields the admin
and ``adddatacenter`` show for them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import SimpleNamespace

from django import forms
from django.core.exceptions import ValidationError as DjangoValidationError
from django.utils.module_loading import import_string


def no_spec_problems(datacenter, spec: dict) -> Iterable[tuple[str, str]]:
    return ()


@dataclass(frozen=True)
class BackendKind:
    """One execution backend, as the registry knows it."""

    name: str  # as a datacenter names it (``Datacenter.backend``)
    label: str  # the choice, as the admin shows it
    backend: str  # the dotted path of its ``Backend`` class, imported when first used
    # The settings it owns: a form whose fields are named as the admin and the commands show
    # them, their defaults its fields' ``initial``; None when it has none.
    settings_form: type[forms.Form] | None = None
    # What it cannot run of a submission: (field, problem) pairs, each a ValidationError of
    # the submission (``jobs.spec``). ``spec`` holds the values the core's rules normalized.
    spec_problems: Callable[..., Iterable[tuple[str, str]]] = no_spec_problems
    # Whether a datacenter's capacity can be read from its cluster (``capacity_from_cluster``).
    reads_capacity: bool = False
    # Its ``adddatacenter`` options, added to that command's parser (dest: the settings' names).
    arguments: Callable[..., None] | None = field(default=None, compare=False)
    # The dotted path of a function of a datacenter: where its users' namespaces are (a
    # Kubernetes API server's URL; None: not known now); None for a backend that makes none.
    # Two datacenters of the backend in one place share those namespaces where their
    # prefixes allow the same names.
    place: str | None = None

    def place_of(self, datacenter) -> str | None:
        return import_string(self.place)(datacenter)

    @property
    def settings_fields(self) -> dict[str, forms.Field]:
        return dict(self.settings_form.base_fields) if self.settings_form else {}

    def settings_defaults(self) -> dict:
        return {name: f.initial() if callable(f.initial) else f.initial
                for name, f in self.settings_fields.items()}

    def settings_clean(self, values: dict) -> dict:
        """``values`` (those not given: their defaults) checked by the backend's rules and
        normalized; DjangoValidationError naming each field and its problem."""
        if self.settings_form is None:
            return {}
        form = self.settings_form(data={**self.settings_defaults(), **values})
        if not form.is_valid():
            raise DjangoValidationError(form.errors.as_data())
        return form.cleaned_data

    def settings_of(self, datacenter) -> SimpleNamespace:
        """The datacenter's settings of this backend, as attributes; defaults where unset."""
        return SimpleNamespace(**{**self.settings_defaults(), **datacenter.backend_settings})


_registered: dict[str, BackendKind] = {}


def backend_register(kind: BackendKind) -> None:
    """Offer ``kind`` to datacenters (again: the same kind replaces itself)."""
    _registered[kind.name] = kind


def backend_unregister(name: str) -> None:
    _registered.pop(name, None)


def backend_kind(name: str) -> BackendKind:
    try:
        return _registered[name]
    except KeyError:
        raise ValueError(f"no execution backend named {name!r}") from None


def backend_kinds() -> list[BackendKind]:
    return list(_registered.values())


def backend_choices() -> list[tuple[str, str]]:
    """``Datacenter.backend``'s choices: the backends registered, in the registry's order."""
    return [(kind.name, kind.label) for kind in _registered.values()]


def backend_settings_fields() -> dict[str, forms.Field]:
    """Every registered backend's settings fields, by name (as the admin's form holds them)."""
    return {name: f for kind in _registered.values() for name, f in kind.settings_fields.items()}
