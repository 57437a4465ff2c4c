"""The config model is the one source of defaults: each module that takes a
config value as a parameter defaults to exactly the config key's default."""

from __future__ import annotations

import inspect

from meshwire.control.common.config import (
    ApiConfig,
    Config,
    DataplaneConfig,
    LogConfig,
    ReconcileConfig,
    VxlanConfig,
)
from meshwire.control.common.queue import WorkQueue
from meshwire.control.common.retries import ExponentialBackoff
from meshwire.control.daemon.slot_keeper import SlotKeeper
from meshwire.control.daemon.uninstall_watch import UninstallWatch
from meshwire.control.informer.informer import InformerOptions
from meshwire.control.informer.reflector import Reflector
from meshwire.control.links.vxlan import VxlanDriver
from meshwire.control.reconcile.derive import NodeView
from meshwire.control.reconcile.status_writer import KubeStatusApi, StatusWriter
from meshwire.control.wire.supervisor import PoolSettings
from meshwire.dataplane.tap import TapSpec
from meshwire.dataplane.worker import WorkerConfig


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


def test_the_api_watchers_and_writers_default_to_the_api_keys() -> None:
    api = ApiConfig()
    for callable_ in (SlotKeeper, UninstallWatch, Reflector):
        assert parameter_default(callable_, "request_timeout") == api.request_timeout
        assert parameter_default(callable_, "watch_timeout") == api.watch_timeout
    assert parameter_default(KubeStatusApi, "request_timeout") == api.request_timeout


def test_the_wire_and_the_dataplane_default_to_the_config_keys() -> None:
    config, dataplane, log = Config.model_fields, DataplaneConfig(), LogConfig()
    settings = PoolSettings(1, "127.0.0.1", 51112)
    assert (settings.batch_frames, settings.log_level, settings.log_format) == (
        dataplane.batch_frames,
        log.level,
        log.format,
    )
    worker = WorkerConfig()
    assert (worker.batch_frames, worker.log_level, worker.log_format) == (
        dataplane.batch_frames,
        log.level,
        log.format,
    )
    assert worker.report_interval == settings.report_interval
    assert TapSpec("eth1").mtu == config["mtu"].default
    assert parameter_default(VxlanDriver, "port") == VxlanConfig().port
