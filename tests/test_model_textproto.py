"""The protobuf text format as KNE files use it, read without a schema."""

from __future__ import annotations

import pytest

from meshwire.control.model.textproto import Message, Scalar, TextProtoError, parse


def scalars(message: Message, name: str) -> list[str]:
    out = []
    for field in message.named(name):
        assert isinstance(field.value, Scalar)
        out.append(field.value.text)
    return out


def test_fields_keep_their_order_lines_and_quoting() -> None:
    message = parse('name: "lab"\n\nvendor: ARISTA\nsize: 42\n')
    assert [(f.name, f.value, f.line) for f in message.fields] == [
        ("name", Scalar("lab", True, 1), 1),
        ("vendor", Scalar("ARISTA", False, 3), 3),
        ("size", Scalar("42", False, 4), 4),
    ]


@pytest.mark.parametrize(
    "text",
    [
        'n { a: "x" }',
        'n: { a: "x" }',
        'n < a: "x" >',
        'n: < a: "x" >',
        'n {\n  a: "x",\n}',
        'n { a: "x"; }',
    ],
)
def test_every_message_spelling_reads_the_same(text: str) -> None:
    (field,) = parse(text).fields
    assert isinstance(field.value, Message)
    assert scalars(field.value, "a") == ["x"]


def test_comments_are_skipped_anywhere() -> None:
    message = parse('# head\nname: "a#b"  # tail\n# end')
    assert scalars(message, "name") == ["a#b"]


def test_a_list_is_the_field_repeated() -> None:
    message = parse('args: ["-a", "-b"]\nenv: [{ k: "X" }, { k: "Y" }]\nnone: []')
    assert scalars(message, "args") == ["-a", "-b"]
    assert [f.value.fields[0].value for f in message.named("env")] == [  # type: ignore[union-attr]
        Scalar("X", True, 2),
        Scalar("Y", True, 2),
    ]
    assert message.named("none") == []


def test_strings_join_and_unescape() -> None:
    message = parse(r"""s: "a" 'b' "\"\n\t\\\x41\101\u00e9" """)
    assert scalars(message, "s") == ['ab"\n\t\\AAé']


def test_numbers_identifiers_and_signs_are_kept_as_written() -> None:
    message = parse("a: -3 b: 1.5e-3 c: 0x1F d: -inf e: true f: 2.0f")
    assert [f.value.text for f in message.fields] == [  # type: ignore[union-attr]
        "-3",
        "1.5e-3",
        "0x1F",
        "-inf",
        "true",
        "2.0f",
    ]


def test_extension_and_any_field_names_are_read() -> None:
    message = parse("[type.googleapis.com/pkg.Msg] { a: 1 }\n[pkg.ext]: 2")
    assert [f.name for f in message.fields] == ["[type.googleapis.com/pkg.Msg]", "[pkg.ext]"]


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        ("a {\n b: 1\n", 2, "unexpected end of text, expected '}' to close '{' of line 1"),
        ("a: 1\nb 2", 2, "expected ':' or '{' after field 'b', found '2'"),
        ("a: ", 1, "unexpected end of text, expected a value for 'a'"),
        ("a: }", 1, "expected a value for 'a', found '}'"),
        ("a: [1 2]", 1, "expected ',' or ']' in the list of 'a', found '2'"),
        ('a: "x\\z"', 1, "unknown escape \\z in string"),
        ('a: "open\nb: 1', 1, "unexpected character '\"'"),
        ("\n\n: 1", 3, "expected a field name, found ':'"),
        ("a: -{", 1, "expected a value for 'a', found '{'"),
    ],
)
def test_errors_name_the_line(text: str, line: int, reason: str) -> None:
    with pytest.raises(TextProtoError) as caught:
        parse(text)
    assert (caught.value.line, caught.value.reason) == (line, reason)
    assert str(caught.value) == f"line {line}: {reason}"
