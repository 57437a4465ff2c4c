"""A reader for the protobuf text format without a schema (KNE writes its topologies in it).

`parse(text)` gives the tree of fields as written: every field with its line,
messages nested, scalars kept as their text. Without a schema it cannot know
which fields are repeated or what type a scalar is, so the caller decides; it
can therefore skip any field it does not need, whatever that field holds.

Accepted syntax (what `prototext` writes and reads): `name: value`,
`name { ... }` and `name: { ... }` (also with `< >`), `name: [v1, v2]` for a
repeated field (read as the field given once per element), optional `,` or
`;` after a field, `#` comments, strings in `"` or `'` with C escapes and
adjacent strings joined, numbers, identifiers (enum values, `true`), and
`[ext.name]` / `[type.googleapis.com/x]` field names.

Errors raise `TextProtoError` with the line (1-based) of the offending token.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TOKEN = re.compile(
    r"""
    (?P<space>[ \t\r\f\v]+|\#[^\n]*)
    | (?P<newline>\n)
    | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
    | (?P<number>0[xX][0-9a-fA-F]+|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFuUlL]*)
    | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
    | (?P<punct>[{}<>\[\]:,;/.-])
    """,
    re.VERBOSE,
)
_ESCAPE = re.compile(
    r"\\(?:([0-7]{1,3})|x([0-9a-fA-F]{1,2})|u([0-9a-fA-F]{4})|U([0-9a-fA-F]{8})|(.))"
)
_SIMPLE_ESCAPES = {
    "n": "\n",
    "t": "\t",
    "r": "\r",
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "v": "\v",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "?": "?",
}
_CLOSE = {"{": "}", "<": ">"}
_NOT_IN_NAMES = frozenset("{}<>[]:,;")


class TextProtoError(ValueError):
    """Text that is not in the protobuf text format; `line` is 1-based."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"line {line}: {reason}")
        self.line = line
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Scalar:
    """A scalar as written: `text` is a string's decoded content, else the literal token."""

    text: str
    quoted: bool
    line: int


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    value: Scalar | Message
    line: int


@dataclass(frozen=True, slots=True)
class Message:
    fields: tuple[Field, ...]
    line: int

    def named(self, name: str) -> list[Field]:
        """The fields called `name`, in the order written."""
        return [f for f in self.fields if f.name == name]


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str
    text: str
    line: int


def parse(text: str) -> Message:
    """The top-level message of `text`; raises TextProtoError."""
    return _Parser(_tokens(text)).document()


def _tokens(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    line = 1
    position = 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            raise TextProtoError(line, f"unexpected character {text[position]!r}")
        kind = match.lastgroup or ""
        if kind == "newline":
            line += 1
        elif kind != "space":
            tokens.append(_Token(kind, match.group(), line))
        position = match.end()
    return tokens


def _unescape(literal: str, line: int) -> str:
    def one(match: re.Match[str]) -> str:
        octal, hex2, hex4, hex8, simple = match.groups()
        if octal is not None:
            return chr(int(octal, 8))
        if hex2 is not None:
            return chr(int(hex2, 16))
        if hex4 is not None or hex8 is not None:
            return chr(int(hex4 or hex8, 16))
        if simple in _SIMPLE_ESCAPES:
            return _SIMPLE_ESCAPES[simple]
        raise TextProtoError(line, f"unknown escape \\{simple} in string")

    return _ESCAPE.sub(one, literal[1:-1])


class _Parser:
    def __init__(self, tokens: list[_Token]) -> None:
        self.tokens = tokens
        self.at = 0

    def peek(self) -> _Token | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self, expected: str) -> _Token:
        token = self.peek()
        if token is None:
            last = self.tokens[-1].line if self.tokens else 1
            raise TextProtoError(last, f"unexpected end of text, expected {expected}")
        self.at += 1
        return token

    def accept(self, text: str) -> bool:
        token = self.peek()
        if token is not None and token.kind == "punct" and token.text == text:
            self.at += 1
            return True
        return False

    def document(self) -> Message:
        fields: list[Field] = []
        while self.peek() is not None:
            fields.extend(self.field())
        return Message(tuple(fields), 1)

    def message(self, opening: _Token) -> Message:
        close = _CLOSE[opening.text]
        fields: list[Field] = []
        while not self.accept(close):
            if self.peek() is None:
                raise TextProtoError(
                    self.tokens[-1].line,
                    f"unexpected end of text, expected {close!r} "
                    f"to close {opening.text!r} of line {opening.line}",
                )
            fields.extend(self.field())
        return Message(tuple(fields), opening.line)

    def field(self) -> list[Field]:
        name_token = self.take("a field name")
        if name_token.kind == "ident":
            name = name_token.text
        elif name_token.text == "[":
            name = self.bracketed_name()
        else:
            raise TextProtoError(
                name_token.line, f"expected a field name, found {name_token.text!r}"
            )
        colon = self.accept(":")
        values: list[Scalar | Message]
        token = self.take(f"a value for {name!r}")
        if token.kind == "punct" and token.text in _CLOSE:
            values = [self.message(token)]
        elif not colon:
            raise TextProtoError(
                token.line, f"expected ':' or '{{' after field {name!r}, found {token.text!r}"
            )
        elif token.kind == "punct" and token.text == "[":
            values = self.list_values(name)
        else:
            values = [self.scalar(token, name)]
        if not self.accept(","):
            self.accept(";")
        return [Field(name, value, name_token.line) for value in values]

    def bracketed_name(self) -> str:
        parts: list[str] = []
        while not self.accept("]"):
            token = self.take("']' to close an extension name")
            if token.kind not in ("ident", "punct") or token.text in _NOT_IN_NAMES:
                raise TextProtoError(token.line, f"unexpected {token.text!r} in extension name")
            parts.append(token.text)
        return "[" + "".join(parts) + "]"

    def list_values(self, name: str) -> list[Scalar | Message]:
        values: list[Scalar | Message] = []
        if self.accept("]"):
            return values
        while True:
            token = self.take(f"a value in the list of {name!r}")
            if token.kind == "punct" and token.text in _CLOSE:
                values.append(self.message(token))
            else:
                values.append(self.scalar(token, name))
            if self.accept("]"):
                return values
            if not self.accept(","):
                found = self.take(f"',' or ']' in the list of {name!r}")
                raise TextProtoError(
                    found.line, f"expected ',' or ']' in the list of {name!r}, found {found.text!r}"
                )

    def scalar(self, token: _Token, name: str) -> Scalar:
        if token.kind == "string":
            text = _unescape(token.text, token.line)
            following = self.peek()
            while following is not None and following.kind == "string":
                self.at += 1
                text += _unescape(following.text, following.line)
                following = self.peek()
            return Scalar(text, True, token.line)
        if token.kind in ("number", "ident"):
            return Scalar(token.text, False, token.line)
        if token.kind == "punct" and token.text == "-":
            number = self.take(f"a number for {name!r}")
            if number.kind in ("number", "ident"):
                return Scalar("-" + number.text, False, token.line)
            token = number
        raise TextProtoError(token.line, f"expected a value for {name!r}, found {token.text!r}")
