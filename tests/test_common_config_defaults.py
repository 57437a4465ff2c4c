"""The config model is the one source of defaults: each module that takes a
config value as a parameter defaults to exactly the config key's default."""

from __future__ import annotations

import inspect

from meshwire.control.common.config import ApiConfig, Config, ReconcileConfig, VxlanConfig
from meshwire.control.common.queue import WorkQueue
from meshwire.control.common.retries import ExponentialBackoff
from meshwire.control.informer.informer import InformerOptions
from meshwire.control.reconcile.derive import NodeView
from meshwire.control.reconcile.status_writer import StatusWriter


def parameter_default(callable_: object, name: str) -> object:
    return inspect.signature(callable_).parameters[name].default  # type: ignore[arg-type]


def test_module_defaults_are_the_config_models() -> None:
    reconcile, api = ReconcileConfig(), ApiConfig()
    assert parameter_default(WorkQueue, "debounce") == reconcile.debounce
    assert parameter_default(ExponentialBackoff, "base") == reconcile.backoff_min
    assert parameter_default(ExponentialBackoff, "cap") == reconcile.backoff_max
    assert parameter_default(StatusWriter, "rate") == reconcile.status_rate
    options = InformerOptions()
    assert (options.request_timeout, options.watch_timeout) == (
        api.request_timeout,
        api.watch_timeout,
    )
    view = NodeView(node_ip="127.0.0.1")
    config = Config.model_fields
    assert view.mtu == config["mtu"].default
    assert view.inter_node_link_type == config["inter_node_link_type"].default
    assert view.vni_base == VxlanConfig().vni_base
