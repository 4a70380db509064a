"""Call notations: how a harness writes and reads a tool call.

Each notation turns a canonical :class:`~real_runs.world.workspace.Call` into the text a
model should emit (``format``) and back (``parse``). ``parse`` never raises: anything it
cannot read exactly (junk, truncation, an unknown tool, a wrong argument set) is None.
``parse_many`` reads a single-turn harness's whole reply (several calls) into a list
whose failed tail is a single None. ``schema`` is the tool list in the notation's own
style. A notation is built with ``names`` (canonical tool -> the name the harness
shows), so harnesses can rename tools the way real agent frameworks do.
"""
from __future__ import annotations

import json
import re
import shlex

from real_runs.world.workspace import TOOLS, Call, make_call


class Syntax:
    """Base notation: tool renaming, generic schema, split-on-separator ``parse_many``."""

    item = "{tool}({args})"      # schema entry template
    arg_sep = ","
    sep = "; "                   # call separator in a single-turn reply

    def __init__(self, names: dict[str, str] | None = None):
        names = dict(names or {})
        unknown = set(names) - set(TOOLS)
        if unknown:
            raise ValueError(f"names={sorted(unknown)} are not tools: allowed are {list(TOOLS)}")
        self.names = {t: names.get(t, t) for t in TOOLS}
        self.tools = {v: k for k, v in self.names.items()}
        self.schema = self.render_schema()    # the tool list in this notation

    def render_schema(self) -> str:
        return " ".join(self.item.format(tool=self.names[t], args=self.arg_sep.join(a))
                        .replace(" )", ")") for t, a in TOOLS.items())

    def format(self, call: Call) -> str:
        raise NotImplementedError

    def parse(self, text: str) -> Call | None:
        raise NotImplementedError

    def parse_many(self, text: str) -> list[Call | None]:
        out = []
        for part in text.split(self.sep):
            call = self.parse(part)
            out.append(call)
            if call is None:
                break
        return out

    # helpers for subclasses
    def _positional(self, name: str, args) -> Call | None:
        tool = self.tools.get(name)
        return None if tool is None else make_call(tool, args)

    def _named(self, name: str, kwargs: dict) -> Call | None:
        tool = self.tools.get(name)
        if tool is None or not isinstance(kwargs, dict) or set(kwargs) != set(TOOLS[tool]):
            return None
        return make_call(tool, [kwargs[a] for a in TOOLS[tool]])


class JsonSyntax(Syntax):
    """``{"tool":"write","path":"a","text":"x"}``"""

    item = "{tool}{{{args}}}"

    def format(self, call):
        d = {"tool": self.names[call.tool], **dict(zip(TOOLS[call.tool], call.args))}
        return json.dumps(d, separators=(",", ":"))

    def parse(self, text):
        try:
            d = json.loads(text)
        except (ValueError, RecursionError):
            return None
        if not isinstance(d, dict) or not isinstance(d.get("tool"), str):
            return None
        name = d.pop("tool")
        return self._named(name, d)


class _ConcatenatedCalls:
    """Calls that can stand back to back in one reply, each matched by `pattern`;
    the class provides `_from_match(m) -> Call | None`."""

    pattern: re.Pattern

    def parse(self, text):
        m = self.pattern.fullmatch(text.strip())
        return None if m is None else self._from_match(m)

    def parse_many(self, text):
        out, pos, text = [], 0, text.rstrip()
        while pos < len(text):
            m = self.pattern.match(text, pos)
            call = None if m is None else self._from_match(m)
            out.append(call)
            if call is None:
                break
            pos = m.end()
        return out or [None]


_XML_CALL = re.compile(r'\s*<(\w+)((?:\s+\w+="[^"<>]*")*)\s*(?:/>|>([^<]*)</\1>)')
_XML_ATTR = re.compile(r'(\w+)="([^"<>]*)"')


class XmlSyntax(_ConcatenatedCalls, Syntax):
    """``<write path="a">x</write>``, ``<move src="a" dst="b"/>``, ``<finish/>``.

    A trailing ``text`` argument is the element body; the others are attributes.
    """

    pattern = _XML_CALL
    sep = " "

    def format(self, call):
        names = TOOLS[call.tool]
        attrs = "".join(f' {k}="{v}"' for k, v in zip(names, call.args) if k != "text")
        tag = self.names[call.tool]
        if names and names[-1] == "text":
            return f"<{tag}{attrs}>{call.args[-1]}</{tag}>"
        return f"<{tag}{attrs}/>"

    def render_schema(self):
        parts = []
        for t, a in TOOLS.items():
            attrs = "".join(" " + k for k in a if k != "text")
            parts.append(f"<{self.names[t]}{attrs}>" + ("text" if a and a[-1] == "text" else ""))
        return " ".join(parts)

    def _from_match(self, m) -> Call | None:
        kwargs = dict(_XML_ATTR.findall(m.group(2)))
        if m.group(3) is not None:
            if "text" in kwargs:
                return None
            kwargs["text"] = m.group(3)
        return self._named(m.group(1), kwargs)


_ARG = r'(?:"[^"\\]*"|-?\d+)'
_FUNC_CALL = re.compile(rf"(\w+)\(\s*({_ARG}(?:\s*,\s*{_ARG})*)?\s*\)")
_ARG_RE = re.compile(_ARG)


def _unquote(tok: str) -> str:
    return tok[1:-1] if tok.startswith('"') else tok


class FuncSyntax(Syntax):
    """Function call with quoted strings: ``write("a", "x")``, ``finish()``."""

    arg_sep = ", "

    def format(self, call):
        return f"{self.names[call.tool]}(" + ", ".join(f'"{a}"' for a in call.args) + ")"

    def parse(self, text):
        m = _FUNC_CALL.fullmatch(text.strip())
        if m is None:
            return None
        args = [_unquote(t) for t in _ARG_RE.findall(m.group(2) or "")]
        return self._positional(m.group(1), args)


_SEXP_ATOM = r'(?:"[^"\\()]*"|[^\s()"]+)'
_SEXP_CALL = re.compile(rf"\s*\((\w+)((?:\s+{_SEXP_ATOM})*)\s*\)")
_SEXP_ATOM_RE = re.compile(_SEXP_ATOM)


class SexpSyntax(_ConcatenatedCalls, Syntax):
    """S-expressions: ``(write "a" "x")``; several calls side by side in one reply."""

    pattern = _SEXP_CALL
    item = "({tool} {args})"
    arg_sep = " "
    sep = " "

    def format(self, call):
        return "(" + " ".join([self.names[call.tool]] + [f'"{a}"' for a in call.args]) + ")"

    def _from_match(self, m):
        args = [_unquote(t) for t in _SEXP_ATOM_RE.findall(m.group(2))]
        return self._positional(m.group(1), args)


_KV = re.compile(r'(\w+)=("[^"]*"|[^\s"]*)')


class KvSyntax(Syntax):
    """key=value pairs: ``tool=write path=a text=x``."""

    item = "{tool}:{args}"
    sep = " ; "

    def format(self, call):
        pairs = [f"{k}={v}" for k, v in zip(TOOLS[call.tool], call.args)]
        return " ".join([f"tool={self.names[call.tool]}", *pairs])

    def parse(self, text):
        kwargs, pos, text = {}, 0, text.strip()
        while pos < len(text):
            m = _KV.match(text, pos)
            glued = m is not None and m.end() < len(text) and not text[m.end()].isspace()
            if m is None or glued or m.group(1) in kwargs:
                return None
            kwargs[m.group(1)] = _unquote(m.group(2))
            pos = m.end()
            while pos < len(text) and text[pos].isspace():
                pos += 1
        name = kwargs.pop("tool", None)
        return None if name is None else self._named(name, kwargs)


class BracketSyntax(Syntax):
    """ReAct-style ``Write[a, x]``, ``Finish[]``."""

    item = "{tool}[{args}]"
    arg_sep = ", "
    _call = re.compile(r"(\w+)\[([^\[\]]*)\]")

    def format(self, call):
        return f"{self.names[call.tool]}[" + ", ".join(call.args) + "]"

    def parse(self, text):
        m = self._call.fullmatch(text.strip())
        if m is None:
            return None
        inner = m.group(2).strip()
        args = [a.strip() for a in inner.split(",")] if inner else []
        return self._positional(m.group(1), args)


_SH_TOKEN = re.compile(r"""'([^']*)'|"([^"]*)"|([^\s'"]+)""")
_SH_LINE = re.compile(r"""\s*(?:(?:'[^']*'|"[^"]*"|[^\s'"]+)(?:\s+|$))*""")


class ShellSyntax(Syntax):
    """Shell commands: ``echo x > a``, ``echo x >> a``, ``mv a b``, ``cp a b``, ``rm a``,
    ``cat a``, ``answer x``, ``exit``. Single-turn replies join commands with ``&&``."""

    sep = " && "
    _cmd = {"move": "mv", "copy": "cp", "delete": "rm", "read": "cat", "answer": "answer",
            "finish": "exit"}
    _rev = {v: k for k, v in _cmd.items()}

    def render_schema(self):
        return "echo T > F, echo T >> F, mv F G, cp F G, rm F, cat F, answer X, exit"

    def format(self, call):
        q = [shlex.quote(a) for a in call.args]
        if call.tool == "write":
            return f"echo {q[1]} > {q[0]}"
        if call.tool == "append":
            return f"echo {q[1]} >> {q[0]}"
        return " ".join([self._cmd[call.tool]] + q)

    def parse(self, text):
        if _SH_LINE.fullmatch(text) is None:
            return None
        toks = [a or b or c for a, b, c in _SH_TOKEN.findall(text)]
        if not toks:
            return None
        if toks[0] == "echo":
            if len(toks) == 4 and toks[2] in (">", ">>"):
                return make_call("write" if toks[2] == ">" else "append", (toks[3], toks[1]))
            return None
        tool = self._rev.get(toks[0])
        return None if tool is None else make_call(tool, toks[1:])
