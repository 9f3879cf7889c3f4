"""The API's documents, the front end's types and docs/api.md say the same fields.

``jupyter_air/jobs/api_models.py`` is the source: each model's JSON schema (what
``model_dump(mode="json")`` sends) is compared with the TypeScript interface that reads it
(labextension/src, ``interface IName { field?: type; }``), field by field: the names, which
may be left out (``?``), which may be ``null``, the kind of value and, where the front end
spells them, the words a string may be; and with docs/api.md's examples of each route
(its fenced ``json`` blocks), which must carry every required key, no other, and validate.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

import pytest
from pydantic import BaseModel, TypeAdapter

from jupyter_air.jobs.api_models import (
    AttemptNode,
    GrantDocument,
    JobDocument,
    JobPermissions,
    JobPermissionsChange,
    LabNotification,
    LogLineDocument,
    LogsPage,
    NotificationLink,
    NotificationsPage,
    PermissionLevel,
    SessionCells,
    StacksPage,
    TrackingStores,
    line_document,
)
from jupyter_air.jobs.permissions import KINDS, Level
from jupyter_air.logs.levels import NAMES, LevelName
from jupyter_air.logs.query import LogLine

ROOT = Path(__file__).resolve().parents[2]
TYPES = ROOT / "labextension" / "src"
API = ROOT / "docs" / "api.md"

#: model -> the interface of the front end that reads it (labextension/src/<file>).
#: The permissions documents have none: no view of the front end reads those routes.
INTERFACES: dict[type[BaseModel], tuple[str, str]] = {
    JobDocument: ("logs/types.ts", "IJob"),
    LogsPage: ("logs/types.ts", "ILogsResponse"),
    SessionCells: ("logs/types.ts", "ICellsResponse"),
    StacksPage: ("logs/types.ts", "IStacksResponse"),
    TrackingStores: ("runs/types.ts", "IStoresResponse"),
    NotificationsPage: ("notifications/model.ts", "INotificationsAnswer"),
    LabNotification: ("notifications/model.ts", "IAirNotification"),
    NotificationLink: ("notifications/model.ts", "INotificationLink"),
}

#: (route's heading in docs/api.md, which json block under it, the model of its example).
EXAMPLES: list[tuple[str, int, type[BaseModel]]] = [
    ("GET jupyter-air/jobs", 0, JobDocument),
    ("GET jupyter-air/jobs/<id>/logs", 0, LogsPage),
    ("GET jupyter-air/jobs/<id>/cells", 0, SessionCells),
    ("GET jupyter-air/jobs/<id>/stacks", 0, StacksPage),
    ("GET jupyter-air/runs/stores", 0, TrackingStores),
    ("GET jupyter-air/jobs/<id>/permissions", 0, JobPermissions),
    ("PUT jupyter-air/jobs/<id>/permissions", 1, JobPermissionsChange),
    ("GET jupyter-air/notifications?after=<id>&wait=<seconds>", 0, NotificationsPage),
]


# -- one field, as either side says it -------------------------------------------------


@dataclass(frozen=True)
class Field:
    optional: bool  # the key may be left out
    nullable: bool
    kind: str  # number, string, boolean, array, object
    #: object: the model's or interface's name; array: None (see ``items``).
    ref: str | None = None
    items: Field | None = None
    #: A string's words, when the type names them (None: any string).
    words: frozenset[str] | None = None


# -- the models' side: their JSON schema ------------------------------------------------


def schema_of(model: type[BaseModel]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The model's schema as sent, and its definitions (nested models, enums)."""
    schema = model.model_json_schema(mode="serialization")
    return schema, schema.get("$defs", {})


def model_fields(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Field]:
    required = set(schema.get("required", ()))
    return {
        name: schema_field(prop, defs, optional=name not in required)
        for name, prop in schema["properties"].items()
    }


def schema_field(prop: dict[str, Any], defs: dict[str, Any], optional: bool = False) -> Field:
    choices = prop.get("anyOf", [prop])
    nullable = any(c.get("type") == "null" for c in choices)
    rest = [c for c in choices if c.get("type") != "null"]
    assert len(rest) == 1, f"a union the check does not know: {prop}"
    one = rest[0]
    ref = None
    if "$ref" in one:
        ref = one["$ref"].rsplit("/", 1)[-1]
        one = defs[ref]
    words = one.get("enum", [one["const"]] if "const" in one else None)
    kind = {"integer": "number", "number": "number"}.get(one.get("type", ""), one.get("type"))
    if kind == "array":
        return Field(optional, nullable, "array", items=schema_field(one["items"], defs))
    if kind == "object":
        return Field(optional, nullable, "object", ref=ref)
    assert kind in ("string", "boolean", "number"), f"a type the check does not know: {one}"
    return Field(optional, nullable, kind, words=frozenset(words) if words else None)


# -- the front end's side: its interfaces and type aliases -------------------------------

_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.DOTALL)
_INTERFACE = re.compile(
    r"export interface (\w+)(?:\s+extends\s+([\w\s,]+?))?\s*\{(.*?)\n\}", re.DOTALL
)
_MEMBER = re.compile(r"^\s*(\w+)(\??)\s*:\s*([^;]+);", re.MULTILINE)
_ALIAS = re.compile(r"export type (\w+)\s*=\s*([^;]+);")


@dataclass
class TypeScript:
    interfaces: dict[str, dict[str, tuple[bool, str]]]  # name -> field -> (optional, type)
    aliases: dict[str, str]

    @classmethod
    def read(cls, *paths: Path) -> TypeScript:
        text = _COMMENT.sub("", "\n".join(p.read_text() for p in paths))
        interfaces: dict[str, dict[str, tuple[bool, str]]] = {}
        for name, bases, body in _INTERFACE.findall(text):
            members = {}
            for base in filter(None, (b.strip() for b in bases.split(","))):
                members.update(interfaces[base])  # declared before, in these files
            for field, optional, type_ in _MEMBER.findall(body):
                members[field] = (optional == "?", " ".join(type_.split()))
            interfaces[name] = members
        return cls(interfaces, dict(_ALIAS.findall(text)))

    def fields(self, interface: str) -> dict[str, Field]:
        return {
            name: self.field(type_, optional)
            for name, (optional, type_) in self.interfaces[interface].items()
        }

    def field(self, type_: str, optional: bool = False) -> Field:
        parts = [p for p in self._union(type_) if p != "undefined"]
        nullable = "null" in parts
        parts = [p for p in parts if p != "null"]
        if all(p.startswith("'") or p == "string" for p in parts):
            words = None if "string" in parts else frozenset(p.strip("'") for p in parts)
            return Field(optional, nullable, "string", words=words)
        assert len(parts) == 1, f"a union the check does not know: {type_}"
        one = parts[0]
        if one.endswith("[]"):
            item = one[:-2]
            item = item[1:-1] if item.startswith("(") else item
            return Field(optional, nullable, "array", items=self.field(item))
        if one in ("number", "boolean"):
            return Field(optional, nullable, one)
        assert one in self.interfaces, f"a type the check does not know: {one}"
        return Field(optional, nullable, "object", ref=one)

    def _union(self, type_: str) -> list[str]:
        """The members of a union at its top level, aliases replaced by theirs."""
        parts, depth, start = [], 0, 0
        for i, char in enumerate(type_):
            depth += char in "([<{"
            depth -= char in ")]>}"
            if char == "|" and depth == 0:
                parts.append(type_[start:i].strip())
                start = i + 1
        parts.append(type_[start:].strip())
        out = []
        for part in parts:
            out += self._union(self.aliases[part]) if part in self.aliases else [part]
        return out


def typescript() -> TypeScript:
    """The jobs and logs routes' interfaces."""
    return TypeScript.read(TYPES / "logs" / "types.ts")


# -- comparing the two ----------------------------------------------------------------


def differences(
    model: dict[str, Field],
    ts: dict[str, Field],
    where: str,
    defs: dict[str, Any],
    front: TypeScript,
) -> list[str]:
    """What the interface says otherwise than the model (nested ones compared too)."""
    found = [f"{where}.{name}: in the model, not in the interface" for name in model.keys() - ts]
    found += [f"{where}.{name}: in the interface, not in the model" for name in ts.keys() - model]
    for name in sorted(model.keys() & ts.keys()):
        found += field_differences(model[name], ts[name], f"{where}.{name}", defs, front)
    return found


def field_differences(
    mine: Field, theirs: Field, where: str, defs: dict[str, Any], front: TypeScript
) -> list[str]:
    found = []
    if mine.optional != theirs.optional:
        found.append(f"{where}: may be left out: model {mine.optional}, TS {theirs.optional}")
    if mine.nullable != theirs.nullable:
        found.append(f"{where}: may be null: model {mine.nullable}, TS {theirs.nullable}")
    if mine.kind != theirs.kind:
        return [*found, f"{where}: model {mine.kind}, TS {theirs.kind}"]
    if theirs.words is not None and mine.words != theirs.words:
        found.append(f"{where}: words: model {mine.words}, TS {sorted(theirs.words)}")
    if mine.items and theirs.items:
        found += field_differences(mine.items, theirs.items, f"{where}[]", defs, front)
    if mine.ref and theirs.ref:
        inner = model_fields(defs[mine.ref], defs)
        found += differences(inner, front.fields(theirs.ref), theirs.ref, defs, front)
    return found


@pytest.mark.parametrize("model", INTERFACES, ids=lambda m: m.__name__)
def test_the_front_ends_interface_has_the_models_fields(model: type[BaseModel]) -> None:
    path, interface = INTERFACES[model]
    front = TypeScript.read(TYPES / path)
    schema, defs = schema_of(model)
    assert (
        differences(model_fields(schema, defs), front.fields(interface), interface, defs, front)
        == []
    )


def test_the_comparison_finds_a_field_the_interface_lacks_or_says_otherwise() -> None:
    front = typescript()
    schema, defs = schema_of(JobDocument)
    fields = model_fields(schema, defs)
    del fields["backend"]
    assert differences(fields, front.fields("IJob"), "IJob", defs, front) == [
        "IJob.backend: in the interface, not in the model"
    ]
    defs["AttemptNode"]["required"].remove("ip")  # nested, in the attempts' nodes
    fields = model_fields(schema, defs)
    assert differences(fields, front.fields("IJob"), "IJob", defs, front) == [
        "IAttemptNode.ip: may be left out: model True, TS False"
    ]


def test_the_interface_reader_knows_optional_nullable_lists_and_words() -> None:
    front = typescript()
    line = front.fields("ILogLine")
    assert line["cell"] == Field(optional=True, nullable=True, kind="number")
    assert line["level"].words == {"info", "warning", "error"}  # the alias Level
    codes = front.fields("IAttempt")["exit_codes"]
    assert codes == Field(False, True, "array", items=Field(False, True, "number"))
    assert front.fields("ILogsResponse")["lines"].items == Field(False, False, "object", "ILogLine")


# -- docs/api.md's examples -------------------------------------------------------------


def section(heading: str) -> str:
    """The text under the route's heading, to the next heading."""
    text = API.read_text()
    start = text.index(f"### `{heading}`\n")
    end = re.compile(r"^#{2,3} ", re.MULTILINE).search(text, start + 1)
    return text[start : end.start() if end else len(text)]


def json_blocks(heading: str) -> list[Any]:
    return [json.loads(b) for b in re.findall(r"```json\n(.*?)```", section(heading), re.DOTALL)]


def key_differences(
    example: Any, fields: dict[str, Field], defs: dict[str, Any], where: str
) -> list[str]:
    """The keys the example has that the model does not, or lacks that it requires."""
    keys = set(example)
    found = [f"{where}.{k}: in the example, not in the model" for k in sorted(keys - fields.keys())]
    found += [
        f"{where}.{name}: in the model, not in the example"
        for name, field in fields.items()
        if not field.optional and name not in keys
    ]
    for name in sorted(keys & fields.keys()):
        field, value = fields[name], example[name]
        values = value if field.kind == "array" and isinstance(value, list) else [value]
        ref = field.items.ref if field.items else field.ref
        for v in values:
            if ref and isinstance(v, dict):
                inner = model_fields(defs[ref], defs)
                found += key_differences(v, inner, defs, f"{where}.{name}")
    return found


@pytest.mark.parametrize(
    ("heading", "block", "model"), EXAMPLES, ids=[f"{h}[{b}]" for h, b, _ in EXAMPLES]
)
def test_the_docs_example_has_the_models_keys(
    heading: str, block: int, model: type[BaseModel]
) -> None:
    example = json_blocks(heading)[block]
    schema, defs = schema_of(model)
    assert key_differences(example, model_fields(schema, defs), defs, model.__name__) == []
    model.model_validate(example)  # and its values are of the model's types and words


def test_the_docs_example_of_an_attempts_node_has_its_keys() -> None:
    spans = re.findall(r"`(\{\"node\".*?\})`", section("GET jupyter-air/jobs"), re.DOTALL)
    assert len(spans) == 1
    example = json.loads(spans[0])
    schema, defs = schema_of(AttemptNode)
    assert key_differences(example, model_fields(schema, defs), defs, "AttemptNode") == []


def test_the_key_comparison_finds_a_key_missing_or_extra() -> None:
    schema, defs = schema_of(LogsPage)
    fields = model_fields(schema, defs)
    example = json_blocks("GET jupyter-air/jobs/<id>/logs")[0]
    del example["done"]
    example["lines"][0]["colour"] = "red"
    assert key_differences(example, fields, defs, "LogsPage") == [
        "LogsPage.done: in the model, not in the example",
        "LogsPage.lines.colour: in the example, not in the model",
    ]


# -- the words the documents use are the code's ------------------------------------------


def test_the_documents_words_are_the_codes() -> None:
    assert set(get_args(PermissionLevel)) == set(Level.__members__)
    assert set(get_args(GrantDocument.model_fields["kind"].annotation)) == set(KINDS)
    assert set(get_args(LevelName)) == set(NAMES.values())


def test_a_session_line_says_its_cell_and_another_line_has_no_such_key() -> None:
    page = TypeAdapter(list[LogLineDocument])
    line = line_document(LogLine(1.5, 0, 1, "err", "warning", "[W socket.cpp:697] ..."))
    assert set(line) == {"t", "node", "rank", "stream", "level", "text"}
    assert page.dump_python(page.validate_python([line]), mode="json") == [line]
    session = {**line, "cell": 2, "cell_id": None}
    assert page.dump_python(page.validate_python([session]), mode="json") == [session]
