"""HOST:PORT strings: split for binding and dialling, joined for printing and gRPC targets."""

from __future__ import annotations

import pytest

from meshwire.base import hostport


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("10.0.0.5:51111", ("10.0.0.5", 51111)),
        ("node-a.example:80", ("node-a.example", 80)),
        ("[::]:9100", ("::", 9100)),
        ("[2001:db8::1]:51111", ("2001:db8::1", 51111)),
        (":51111", ("", 51111)),
        ("0.0.0.0:0", ("0.0.0.0", 0)),
        ("0.0.0.0:65535", ("0.0.0.0", 65535)),
    ],
)
def test_split_takes_the_brackets_off_an_ipv6_host(value: str, expected: tuple[str, int]) -> None:
    assert hostport.split(value) == expected


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("51111", "HOST:PORT"),
        ("host:port", "HOST:PORT"),
        ("host:70000", "HOST:PORT"),
        ("0.0.0.0:", "HOST:PORT"),
        ("::1:51111", "an IPv6 host in brackets"),
        ("[::1:51111", "an IPv6 host in brackets"),
        ("[10.0.0.5]:51111", "brackets only around an IPv6 host"),
    ],
)
def test_split_refuses_what_is_not_host_port_saying_why(value: str, why: str) -> None:
    with pytest.raises(ValueError) as refused:
        hostport.split(value)
    assert why in str(refused.value)
    assert repr(value) in str(refused.value)


@pytest.mark.parametrize(
    ("host", "port", "expected"),
    [("10.0.0.5", 51111, "10.0.0.5:51111"), ("2001:db8::1", 7000, "[2001:db8::1]:7000")],
)
def test_join_brackets_an_ipv6_host_and_split_undoes_it(
    host: str, port: int, expected: str
) -> None:
    assert hostport.join(host, port) == expected
    assert hostport.split(expected) == (host, port)
