"""Dump the REST shape of an ARM resource from an azure-mgmt model class, as JSON.

Run as ``python -m tests.infra.arm_models MODULE CLASS`` with the package's folder on PYTHONPATH
(each package release lives in a folder of its own under .venv/armschemas, see
requirements-armschemas.txt). Prints one node for the resource body:

  {"t": "object", "props": {name: node}, "required": [...], "readonly": [...]}
  {"t": "array", "items": node} | {"t": "map", "values": node}
  {"t": "string", "enum": [...] or null} | {"t": "integer"} | {"t": "number"}
  {"t": "boolean"} | {"t": "any"}

Models flatten nested JSON into dotted keys ("properties.siteConfig"); the dump rebuilds the
nesting. A polymorphic model (a discriminator) gets the properties of all its kinds.
"""

from __future__ import annotations

import datetime
import enum
import importlib
import inspect
import json
import re
import sys
import typing
from typing import Any

_PRIMITIVES = {"str": "string", "int": "integer", "long": "integer", "float": "number",
               "bool": "boolean", "iso-8601": "string", "rfc-1123": "string",
               "duration": "string", "date": "string", "time": "string", "unix-time": "integer",
               "bytearray": "string", "base64": "string", "object": "any", "decimal": "number"}
_ENUM_REF = re.compile(r"_models\.(\w+)")
_KEY_SPLIT = re.compile(r"(?<!\\)\.")


class Dumper:
    def __init__(self, models: Any) -> None:
        self.models = models
        self._stack: list[str] = []

    def enum_values(self, cls: type, attr: str) -> list[str] | None:
        try:
            param = inspect.signature(cls.__init__).parameters.get(attr)
        except (TypeError, ValueError):
            return None
        if param is None:
            return None
        for name in _ENUM_REF.findall(str(param.annotation)):
            e = getattr(self.models, name, None)
            if isinstance(e, type) and issubclass(e, enum.Enum):
                return [m.value for m in e]
        return None

    def type_node(self, t: str, enum_values: list[str] | None = None) -> dict[str, Any]:
        if t.startswith("[") and t.endswith("]"):
            return {"t": "array", "items": self.type_node(t[1:-1])}
        if t.startswith("{") and t.endswith("}"):
            return {"t": "map", "values": self.type_node(t[1:-1])}
        if t in _PRIMITIVES:
            node: dict[str, Any] = {"t": _PRIMITIVES[t]}
            if node["t"] == "string":
                node["enum"] = enum_values
            return node
        cls = getattr(self.models, t, None)
        if cls is None:
            return {"t": "any"}
        return self.model(cls)

    def _kinds(self, cls: type) -> list[type]:
        out, todo = [cls], [cls]
        while todo:
            for sub in (getattr(todo.pop(), "_subtype_map", None) or {}).values():
                for name in sub.values():
                    k = getattr(self.models, name, None)
                    if isinstance(k, type) and k not in out:
                        out.append(k)
                        todo.append(k)
        return out

    # -- models generated from TypeSpec: annotated class attributes made with rest_field() --

    def annotation_node(self, a: Any) -> tuple[dict[str, Any], bool]:
        """(node, optional) for an attribute's annotation."""
        origin, args = typing.get_origin(a), typing.get_args(a)
        if origin is typing.Union:
            rest = [x for x in args if x is not type(None)]
            optional = len(rest) < len(args)
            enums = [self._ref(x) for x in rest if self._ref(x) is not None]
            enum_cls = next((e for e in enums if isinstance(e, type)
                             and issubclass(e, enum.Enum)), None)
            if enum_cls is not None:
                return {"t": "string", "enum": [m.value for m in enum_cls]}, optional
            node, _ = self.annotation_node(rest[0]) if len(rest) == 1 else ({"t": "any"}, False)
            return node, optional
        if origin in (list, typing.List):  # noqa: UP006
            return {"t": "array", "items": self.annotation_node(args[0])[0]}, False
        if origin in (dict, typing.Dict):  # noqa: UP006
            return {"t": "map", "values": self.annotation_node(args[1])[0]}, False
        if origin is typing.Literal:
            return {"t": "string", "enum": [str(x) for x in args]}, False
        ref = self._ref(a)
        if isinstance(ref, type):
            if issubclass(ref, enum.Enum):
                return {"t": "string", "enum": [m.value for m in ref]}, False
            return self.model(ref), False
        simple = {str: "string", int: "integer", float: "number", bool: "boolean",
                  datetime.datetime: "string", datetime.timedelta: "string",
                  datetime.date: "string", bytes: "string"}
        if a in simple:
            return ({"t": "string", "enum": None} if simple[a] == "string"
                    else {"t": simple[a]}), False
        return {"t": "any"}, False

    def _ref(self, a: Any) -> Any:
        name = a.__forward_arg__ if isinstance(a, typing.ForwardRef) else (
            a if isinstance(a, str) else None)
        if name is None:
            return a if isinstance(a, type) and a.__module__.startswith("azure.") else None
        return getattr(self.models, name.strip("'\"").removeprefix("_models."), None)

    def rest_model(self, cls: type, root: dict[str, Any]) -> None:
        for klass in reversed(cls.__mro__):
            notes = vars(klass).get("__annotations__", {})
            for attr, field in vars(klass).items():
                if type(field).__name__ != "_RestField":
                    continue
                name = field._rest_name_input or attr
                node, optional = self.annotation_node(notes.get(attr, Any))
                root["props"][name] = node
                if field._visibility == ["read"]:
                    root["readonly"].append(name)
                elif not optional and name not in root["required"]:
                    root["required"].append(name)

    def model(self, cls: type) -> dict[str, Any]:
        if cls.__name__ in self._stack:  # a recursive model: stop here
            return {"t": "any"}
        self._stack.append(cls.__name__)
        root: dict[str, Any] = {"t": "object", "props": {}, "required": [], "readonly": []}
        if not hasattr(cls, "_attribute_map"):
            self.rest_model(cls, root)
            self._stack.pop()
            return root
        for kind in self._kinds(cls):
            validation = getattr(kind, "_validation", {}) or {}
            for attr, spec in (getattr(kind, "_attribute_map", {}) or {}).items():
                path = [p.replace("\\.", ".") for p in _KEY_SPLIT.split(spec["key"])]
                node = root
                for part in path[:-1]:
                    node = node["props"].setdefault(
                        part, {"t": "object", "props": {}, "required": [], "readonly": []})
                leaf = path[-1]
                if leaf not in node["props"]:
                    node["props"][leaf] = self.type_node(spec["type"],
                                                         self.enum_values(kind, attr))
                rules = validation.get(attr, {})
                if rules.get("readonly") and leaf not in node["readonly"]:
                    node["readonly"].append(leaf)
                if rules.get("required") and kind is cls and leaf not in node["required"]:
                    node["required"].append(leaf)
        self._stack.pop()
        return root


def main(module: str, cls_name: str) -> None:
    models = importlib.import_module(module)
    print(json.dumps(Dumper(models).model(getattr(models, cls_name))))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
