"""A small static model of a Terraform module, built from python-hcl2's parse (no terraform binary here).

It records what a module declares (variables, locals, resources, data sources, module calls, outputs)
and every reference its expressions make, so tests can check that each reference resolves.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hcl2

# Prefixes of the providers these modules use; "<prefix>_<type>.<name>" in an expression is a resource reference.
RESOURCE_PREFIXES = ("aws_", "helm_", "kubernetes_", "kubectl_", "random_", "tls_", "null_", "time_")
META_ARGUMENTS = {"source", "version", "count", "for_each", "providers", "depends_on"}

_REF = re.compile(
    r"(?<![\w.\"-])(?P<kind>var|local|module|data)\.(?P<a>[A-Za-z_][\w-]*)(?:\.(?P<b>[A-Za-z_][\w-]*))?"
    r"|(?<![\w.\"-])(?P<rtype>(?:" + "|".join(RESOURCE_PREFIXES) + r")[a-z0-9_]*)\.(?P<rname>[A-Za-z_][\w-]*)"
)
_TEMPLATEFILE = re.compile(r'(?:templatefile|file)\("\$\{path\.module\}/(?P<path>[^"]+)"')


def unquote(text: str) -> str:
    return text[1:-1] if len(text) >= 2 and text[0] == text[-1] == '"' else text


def interpolations(text: str) -> Iterator[str]:
    """The expression parts of an hcl2 value: a whole ``${...}`` expression, or each ``${...}`` in a string."""
    if text.startswith("${") and text.endswith("}") and not text.startswith('"'):
        yield text[2:-1]
        return
    i = 0
    while (start := text.find("${", i)) != -1:
        depth, j = 0, start + 1
        while j < len(text):
            if text[j] == "{":
                depth += 1
            elif text[j] == "}":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        yield text[start + 2 : j]
        i = j + 1


def walk_strings(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for key, value in node.items():
            if key != "__is_block__":
                yield from walk_strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from walk_strings(item)


def blocks(doc: dict[str, Any], kind: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Labelled top-level blocks of one kind (``variable "x" {}`` -> ("x", body))."""
    for entry in doc.get(kind, []):
        for label, body in entry.items():
            yield unquote(label), body


@dataclass
class Reference:
    file: str
    kind: str  # var, local, module, data, resource
    target: str  # name, "module.attr", "type.name"


@dataclass
class ModuleCall:
    name: str
    source: str
    inputs: set[str]
    file: str


@dataclass
class TerraformModule:
    path: Path
    docs: dict[str, dict[str, Any]] = field(default_factory=dict)
    variables: dict[str, dict[str, Any]] = field(default_factory=dict)
    locals: set[str] = field(default_factory=set)
    outputs: set[str] = field(default_factory=set)
    resources: set[str] = field(default_factory=set)
    data: set[str] = field(default_factory=set)
    calls: dict[str, ModuleCall] = field(default_factory=dict)
    references: list[Reference] = field(default_factory=list)
    template_paths: list[tuple[str, str]] = field(default_factory=list)

    @classmethod
    def load(cls, path: Path) -> TerraformModule:
        module = cls(path)
        for tf in sorted(path.glob("*.tf")):
            with tf.open() as handle:
                module.docs[tf.name] = hcl2.load(handle)
        for name, doc in module.docs.items():
            module._declare(name, doc)
        return module

    def _declare(self, file: str, doc: dict[str, Any]) -> None:
        for name, body in blocks(doc, "variable"):
            self.variables[name] = body
        for entry in doc.get("locals", []):
            self.locals.update(k for k in entry if k != "__is_block__")
        for name, _ in blocks(doc, "output"):
            self.outputs.add(name)
        for rtype, named in blocks(doc, "resource"):
            self.resources.update(f"{rtype}.{unquote(n)}" for n in named)
        for dtype, named in blocks(doc, "data"):
            self.data.update(f"{dtype}.{unquote(n)}" for n in named)
        for name, body in blocks(doc, "module"):
            inputs = {k for k in body if k not in META_ARGUMENTS and k != "__is_block__"}
            self.calls[name] = ModuleCall(name, unquote(body["source"]), inputs, file)
        for text in walk_strings(doc):
            for match in _TEMPLATEFILE.finditer(text):
                self.template_paths.append((file, match["path"]))
            for expression in interpolations(text):
                for ref in _REF.finditer(expression):
                    if ref["kind"] == "module":
                        target = f"{ref['a']}.{ref['b']}" if ref["b"] else ref["a"]
                        self.references.append(Reference(file, "module", target))
                    elif ref["kind"] == "data":
                        self.references.append(Reference(file, "data", f"{ref['a']}.{ref['b']}"))
                    elif ref["kind"]:
                        self.references.append(Reference(file, ref["kind"], ref["a"]))
                    else:
                        self.references.append(Reference(file, "resource", f"{ref['rtype']}.{ref['rname']}"))

    def unresolved(self) -> list[str]:
        """References that name nothing this module declares."""
        missing = []
        for ref in self.references:
            if ref.kind == "var":
                ok = ref.target in self.variables
            elif ref.kind == "local":
                ok = ref.target in self.locals
            elif ref.kind == "data":
                ok = ref.target in self.data
            elif ref.kind == "resource":
                ok = ref.target in self.resources
            else:
                ok = ref.target.split(".")[0] in self.calls
            if not ok:
                missing.append(f"{ref.file}: {ref.kind} {ref.target}")
        return sorted(set(missing))

    def is_local_call(self, call: ModuleCall) -> bool:
        return call.source.startswith(("./", "../"))

    def called_path(self, call: ModuleCall) -> Path:
        return (self.path / call.source).resolve()


def module_dirs(root: Path) -> list[Path]:
    return sorted({tf.parent for tf in root.rglob("*.tf") if ".terraform" not in tf.parts})
