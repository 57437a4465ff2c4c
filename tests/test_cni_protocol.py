"""The CNI spec as the plugin reads and answers it: pure, no sockets."""

from __future__ import annotations

import json
from typing import Any

import pytest
from cni_helpers import PREV_RESULT, cni_env, network_config

from meshwire.control.cni.protocol import (
    LATEST_VERSION,
    SUPPORTED_VERSIONS,
    Attachment,
    CniError,
    Command,
    ErrorCode,
    PodRef,
    error_response,
    parse_request,
    success_response,
    version_result,
)


def parse(env: dict[str, str], config: Any) -> Any:
    stdin = config if isinstance(config, str) else json.dumps(config)
    return parse_request(env, stdin)


def failure(env: dict[str, str], config: Any) -> CniError:
    with pytest.raises(CniError) as caught:
        parse(env, config)
    return caught.value


# --- what a valid invocation carries --------------------------------------------


def test_add_from_kubelet_names_the_pod_netns_and_container() -> None:
    request = parse(cni_env("ADD"), network_config(prevResult=PREV_RESULT))
    assert request.command is Command.ADD
    assert request.cni_version == "1.0.0"
    assert request.network == "kindnet"
    assert request.pod == PodRef(namespace="default", name="r1")
    assert request.pod.key == "default/r1"
    assert (request.container_id, request.netns, request.ifname) == (
        "c0ffee01",
        "/var/run/netns/cni-1234",
        "eth0",
    )
    assert request.cni_path == ("/opt/cni/bin",)
    assert request.prev_result == PREV_RESULT


def test_a_runtime_outside_kubernetes_gives_no_pod() -> None:
    request = parse(cni_env("ADD", pod=""), network_config())
    assert request.pod is None


def test_unknown_cni_args_keys_are_ignored() -> None:
    env = cni_env("ADD") | {"CNI_ARGS": "FOO=bar;;K8S_POD_NAME=r2;K8S_POD_NAMESPACE=lab;X="}
    assert parse(env, network_config()).pod == PodRef("lab", "r2")


def test_del_without_a_netns_is_valid_because_the_netns_may_be_gone() -> None:
    env = cni_env("DEL")
    del env["CNI_NETNS"]
    request = parse(env, network_config())
    assert request.command is Command.DEL
    assert request.netns == ""


def test_status_needs_no_container_variables() -> None:
    request = parse({"CNI_COMMAND": "STATUS"}, network_config("1.1.0"))
    assert request.command is Command.STATUS
    assert request.container_id == ""


def test_gc_reads_the_valid_attachments() -> None:
    attachments = [{"containerID": "a1", "ifname": "eth0"}, {"containerID": "b2", "ifname": "e1"}]
    config = network_config("1.1.0", **{"cni.dev/valid-attachments": attachments})
    request = parse({"CNI_COMMAND": "GC", "CNI_PATH": "/opt/cni/bin"}, config)
    assert request.valid_attachments == (Attachment("a1", "eth0"), Attachment("b2", "e1"))


def test_gc_also_reads_the_older_attachments_field_name() -> None:
    config = network_config(
        "1.1.0", **{"cni.dev/attachments": [{"containerID": "a", "ifname": "e"}]}
    )
    request = parse({"CNI_COMMAND": "GC"}, config)
    assert request.valid_attachments == (Attachment("a", "e"),)


def test_version_reads_nothing_but_the_command() -> None:
    request = parse({"CNI_COMMAND": "VERSION"}, "not even json")
    assert request.command is Command.VERSION


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
def test_every_supported_version_is_accepted_for_add(version: str) -> None:
    assert parse(cni_env("ADD"), network_config(version)).cni_version == version


# --- invalid environment: code 4, naming the variable -----------------------------


@pytest.mark.parametrize(
    ("command", "missing"),
    [
        ("ADD", "CNI_NETNS"),
        ("ADD", "CNI_CONTAINERID"),
        ("ADD", "CNI_IFNAME"),
        ("DEL", "CNI_CONTAINERID"),
        ("DEL", "CNI_IFNAME"),
        ("CHECK", "CNI_NETNS"),
    ],
)
def test_a_missing_required_variable_is_code_4_naming_it(command: str, missing: str) -> None:
    env = cni_env(command)
    del env[missing]
    error = failure(env, network_config(prevResult=PREV_RESULT))
    assert error.code == ErrorCode.INVALID_ENV
    assert missing in error.msg
    assert command in error.msg


def test_an_empty_required_variable_counts_as_missing() -> None:
    error = failure(cni_env("ADD", netns=""), network_config())
    assert (error.code, "CNI_NETNS" in error.msg) == (4, True)


def test_no_command_is_code_4() -> None:
    error = failure({}, network_config())
    assert (error.code, error.msg) == (4, "CNI_COMMAND is missing")


def test_an_unknown_command_is_code_4_naming_it() -> None:
    error = failure(cni_env("FROB"), network_config())
    assert error.code == ErrorCode.INVALID_ENV
    assert "CNI_COMMAND 'FROB'" in error.msg
    assert "ADD" in error.details


@pytest.mark.parametrize("container", ["-leading-dash", "has space", "semi;colon", "ünicode"])
def test_a_malformed_container_id_is_code_4(container: str) -> None:
    error = failure(cni_env("ADD", container=container), network_config())
    assert (error.code, "CNI_CONTAINERID" in error.msg) == (4, True)


@pytest.mark.parametrize(
    ("args", "named"),
    [
        ("K8S_POD_NAME", "'K8S_POD_NAME' is not KEY=VALUE"),
        ("=x", "'=x' is not KEY=VALUE"),
        ("K8S_POD_NAME=r1", "no K8S_POD_NAMESPACE"),
        ("K8S_POD_NAMESPACE=default", "no K8S_POD_NAME"),
    ],
)
def test_malformed_cni_args_is_code_4_naming_cni_args(args: str, named: str) -> None:
    error = failure(cni_env("ADD") | {"CNI_ARGS": args}, network_config())
    assert error.code == ErrorCode.INVALID_ENV
    assert "CNI_ARGS" in error.msg
    assert named in error.msg


# --- invalid config: code 6 (cannot decode), 7 (wrong shape), 1 (version) ----------


@pytest.mark.parametrize("stdin", ["", "   \n", "{not json", '{"cniVersion": "1.0.0",}'])
def test_stdin_that_is_not_json_is_code_6(stdin: str) -> None:
    error = failure(cni_env("ADD"), stdin)
    assert error.code == ErrorCode.DECODE_FAILURE
    assert "stdin" in error.msg


@pytest.mark.parametrize("stdin", ["[]", '"x"', "42", "null"])
def test_stdin_that_is_not_an_object_is_code_7(stdin: str) -> None:
    assert failure(cni_env("ADD"), stdin).code == ErrorCode.INVALID_CONFIG


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"name": "n"}, "network config field cniVersion is missing"),
        ({"cniVersion": 1.0, "name": "n"}, "network config field cniVersion must be a string"),
        ({"cniVersion": "1.0.0"}, "network config field name is missing"),
        ({"cniVersion": "1.0.0", "name": ""}, "network config field name must be a non-empty"),
        (
            {"cniVersion": "1.0.0", "name": "n", "prevResult": []},
            "network config field prevResult must be an object",
        ),
    ],
)
def test_a_config_field_of_the_wrong_shape_is_code_7_naming_it(
    config: dict[str, Any], message: str
) -> None:
    error = failure(cni_env("ADD"), config)
    assert error.code == ErrorCode.INVALID_CONFIG
    assert error.msg.startswith(message)


def test_check_without_prev_result_is_code_7() -> None:
    error = failure(cni_env("CHECK"), network_config())
    assert (error.code, "prevResult" in error.msg) == (7, True)


@pytest.mark.parametrize("version", ["0.1.0", "0.2.0", "2.0.0", "1.0", "banana"])
def test_an_unsupported_version_is_code_1_listing_the_supported(version: str) -> None:
    error = failure(cni_env("ADD"), network_config(version))
    assert error.code == ErrorCode.INCOMPATIBLE_VERSION
    assert repr(version) in error.msg
    assert "cniVersion" in error.msg
    assert "1.1.0" in error.details


@pytest.mark.parametrize(
    ("command", "version"),
    [("CHECK", "0.3.1"), ("STATUS", "1.0.0"), ("GC", "1.0.0"), ("STATUS", "0.4.0")],
)
def test_a_command_newer_than_the_config_version_is_code_1(command: str, version: str) -> None:
    config = network_config(version, prevResult=PREV_RESULT)
    error = failure(cni_env(command), config)
    assert error.code == ErrorCode.INCOMPATIBLE_VERSION
    assert command in error.msg


@pytest.mark.parametrize(
    "attachments", ["x", [{"containerID": 1, "ifname": "e"}], [{"ifname": "e"}], ["a"]]
)
def test_gc_with_malformed_attachments_is_code_7(attachments: Any) -> None:
    config = network_config("1.1.0", **{"cni.dev/valid-attachments": attachments})
    error = failure({"CNI_COMMAND": "GC"}, config)
    assert (error.code, "cni.dev/valid-attachments" in error.msg) == (7, True)


# --- what the plugin prints ---------------------------------------------------------


def test_add_prints_prev_result_unchanged() -> None:
    response = success_response(parse(cni_env("ADD"), network_config(prevResult=PREV_RESULT)))
    assert response.exit == 0
    assert json.loads(response.stdout) == PREV_RESULT


def test_add_without_prev_result_prints_an_empty_result_of_the_config_version() -> None:
    response = success_response(parse(cni_env("ADD"), network_config("0.4.0")))
    assert json.loads(response.stdout) == {
        "cniVersion": "0.4.0",
        "interfaces": [],
        "ips": [],
        "dns": {},
    }


@pytest.mark.parametrize("command", ["DEL", "CHECK"])
def test_del_and_check_print_nothing(command: str) -> None:
    response = success_response(parse(cni_env(command), network_config(prevResult=PREV_RESULT)))
    assert (response.exit, response.stdout) == (0, "")


def test_version_lists_every_supported_version() -> None:
    assert json.loads(version_result()) == {
        "cniVersion": LATEST_VERSION,
        "supportedVersions": ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"],
    }
    assert success_response(parse({"CNI_COMMAND": "VERSION"}, "")).stdout == version_result()


@pytest.mark.parametrize("code", list(ErrorCode))
def test_an_error_result_has_the_spec_shape_and_exits_non_zero(code: ErrorCode) -> None:
    response = error_response(CniError(code, "went wrong", "because"), "0.4.0")
    assert response.exit == 1
    assert json.loads(response.stdout) == {
        "cniVersion": "0.4.0",
        "code": int(code),
        "msg": "went wrong",
        "details": "because",
    }


def test_an_error_without_details_omits_the_field() -> None:
    response = error_response(CniError(ErrorCode.TRY_AGAIN_LATER, "later"), "1.1.0")
    assert json.loads(response.stdout) == {"cniVersion": "1.1.0", "code": 11, "msg": "later"}


def test_error_codes_are_the_specs() -> None:
    assert {c.name: int(c) for c in ErrorCode} == {
        "INCOMPATIBLE_VERSION": 1,
        "UNSUPPORTED_FIELD": 2,
        "UNKNOWN_CONTAINER": 3,
        "INVALID_ENV": 4,
        "IO_FAILURE": 5,
        "DECODE_FAILURE": 6,
        "INVALID_CONFIG": 7,
        "TRY_AGAIN_LATER": 11,
        "PLUGIN_NOT_AVAILABLE": 50,
        "LIMITED_CONNECTIVITY": 51,
        "INTERNAL": 100,
    }


def test_a_config_nested_beyond_any_parser_is_code_6_not_a_crash() -> None:
    deep = '{"cniVersion": "1.0.0", "name": "n", "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    assert failure(cni_env("ADD"), deep).code == ErrorCode.DECODE_FAILURE
