"""One interface-name rule for every layer: the model, the link drivers and CNI.

The table is the kernel's `dev_valid_name` on the UTF-8 bytes of a name, plus
"it has a UTF-8 encoding". Each row is checked through all three consumers, so
a name one layer accepts can never be refused by another as something else
(a lone surrogate once passed the model and then escaped the drivers as a
UnicodeEncodeError, retried as if transient).
"""

from __future__ import annotations

import json

import pytest

from meshwire.control.cni.protocol import CniError, ErrorCode, parse_request
from meshwire.control.links.driver_errors import SpecError
from meshwire.control.links.iface import check
from meshwire.control.model.name_rules import interface_name_problem
from meshwire.control.model.validate import validate_topology
from tests.cni_helpers import cni_env, network_config
from tests.model_helpers import link, topology

# (name, None when valid, else a piece of the reason)
TABLE: list[tuple[str, str | None]] = [
    ("eth1", None),
    ("e" * 15, None),
    ("é" * 7, None),  # 14 bytes
    ("Ethernet1", None),
    ("", "required"),
    ("e" * 16, "16 bytes, at most 15"),
    ("é" * 8, "16 bytes, at most 15"),
    (".", "is not allowed"),
    ("..", "is not allowed"),
    ("a/b", "must not contain '/'"),
    ("eth1:0", "must not contain ':'"),
    ("eth 1", "must not contain ' '"),
    ("eth\t1", "must not contain '\\t'"),
    ("eth\n", "must not contain '\\n'"),
    ("eth\0", "must not contain '\\x00'"),
    ("eth\ud800", "not valid UTF-8"),
]


@pytest.mark.parametrize(("name", "reason"), TABLE, ids=[repr(n) for n, _ in TABLE])
def test_one_rule_for_interface_names_in_every_layer(name: str, reason: str | None) -> None:
    problem = interface_name_problem(name)
    if reason is None:
        assert problem is None
    else:
        assert problem is not None and reason in problem

    # The model: a link's local_intf.
    model = validate_topology(topology("r1", link(1, "r2", name or "", "eth1")))
    assert model.ok is (reason is None)
    if reason is not None:
        (problem_,) = model.problems
        assert problem_.field == "local_intf" and reason in problem_.message

    # The link drivers: a spec error, never another exception.
    if reason is None:
        check("lab/1", "/run/netns/x", name, "", 1500)
    else:
        with pytest.raises(SpecError, match="lab/1"):
            check("lab/1", "/run/netns/x", name, "", 1500)

    # CNI: an invalid CNI_IFNAME is error code 4 (invalid environment) naming the variable.
    if not name:
        return  # an empty CNI_IFNAME is the "variable missing" case, not a name
    if reason is None:
        assert (
            parse_request(cni_env("ADD", ifname=name), json.dumps(network_config()).encode()).ifname
            == name
        )
    else:
        with pytest.raises(CniError) as caught:
            parse_request(cni_env("ADD", ifname=name), json.dumps(network_config()).encode())
        assert caught.value.code == ErrorCode.INVALID_ENV
        assert "CNI_IFNAME" in caught.value.msg and reason in caught.value.msg
