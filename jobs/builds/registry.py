"""The registry side of a build: the owner's credentials for an image's registry, whether it
is spoken to over plain HTTP, and whether it has the image already."""


from __future__ import annotations

from registries.models import Registry
from registries.oci import RegistryError, image_ref_parse, manifest_digest
from registries.services import registry_password

from ..backends.base import BackendError


def push_credentials(owner, datacenter, image: str, named: Registry | None = None):
    """The owner's credentials for the registry of ``image``: ``named`` if it is for that
    host, else the first of theirs whose server is that host; None (anonymous) if none."""
    host = image_ref_parse(image).host
    if named is not None and named.server == host:
        return named
    return (Registry.objects.filter(owner=owner, datacenter=datacenter, server=host)
            .order_by("name").first())


def registry_insecure(datacenter, image: str) -> bool:
    """Whether ``image``'s registry is spoken to over plain HTTP: the build registry, when
    its datacenter says so."""
    return datacenter.build_registry_insecure and image_ref_parse(image).host == \
        image_ref_parse(f"{datacenter.build_registry}/x").host


def credentials(registry: Registry | None) -> tuple[str, str] | None:
    return None if registry is None else (registry.username, registry_password(registry))


def image_found(image: str, registry: Registry | None, insecure: bool) -> str | None:
    """The digest of ``image`` if its registry has it; ``BackendError`` naming the registry
    (and the credentials, when it refused them) if it cannot be asked."""
    try:
        return manifest_digest(image, auth=credentials(registry), insecure=insecure)
    except RegistryError as exc:
        raise BackendError(_registry_problem(exc, registry)) from None


def _registry_problem(exc: RegistryError, registry: Registry | None) -> str:
    if exc.refused and registry is not None:
        return (f"{exc} (with your registry credentials {registry.name!r}: paddlectl registry "
                f"-name {registry.name} -password … updates them)")
    if exc.refused:
        return (f"{exc} (you have no registry credentials for it: add some with paddlectl "
                "registry -name NAME -server HOST -username … -password …)")
    return str(exc)


