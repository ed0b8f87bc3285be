"""Objects as documents for people and tools: ``---``-separated YAML (dry runs, ``-o yaml``)
and a JSON ``List`` as ``kubectl`` prints it, keys in the order ``kubectl`` shows them."""

from __future__ import annotations

import json

import yaml

TOP_KEYS = ("apiVersion", "kind", "metadata", "type", "immutable", "spec", "data")
METADATA_KEYS = ("name", "namespace", "labels", "annotations", "ownerReferences")


def _ordered(mapping: dict, first: tuple[str, ...]) -> dict:
    """``first`` in that order, then the other keys as they were."""
    keys = [key for key in first if key in mapping]
    keys += [key for key in mapping if key not in first]
    return {key: mapping[key] for key in keys}


def readable(obj: dict) -> dict:
    """The object with its top-level and metadata keys in a stable, readable order."""
    obj = _ordered(obj, TOP_KEYS)
    if "metadata" in obj:
        obj["metadata"] = _ordered(obj["metadata"], METADATA_KEYS)
    return obj


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (scripts, job.json) as literal blocks, readable as they are; an
    object used twice written out twice, never as a YAML alias."""

    def ignore_aliases(self, data) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def to_yaml(objects: list[dict]) -> str:
    return yaml.dump_all([readable(obj) for obj in objects], Dumper=_Dumper, sort_keys=False,
                         explicit_start=True, allow_unicode=True, width=100)


def to_json(objects: list[dict]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List",
                       "items": [readable(obj) for obj in objects]}, indent=2) + "\n"
