"""The official `kubernetes.aio` API client, built from meshwire's `api.*` config keys.

Shared by the informer and the status writer so both talk to the same server
the same way.

The proxy the environment names for the server (`HTTP_PROXY`, `HTTPS_PROXY`,
`NO_PROXY`, as aiohttp reads them) is looked up once, when the client is made,
not for every request: the client's own `trust_env` session reads the
environment and `~/.netrc` again on each one, in two trips through a thread
pool, which costs more CPU than the rest of the request. A kubeconfig's
`proxy-url` wins over the environment. No netrc credentials are sent to the
server (the Kubernetes clients never read netrc).
"""

from __future__ import annotations

import os

from aiohttp.helpers import get_env_proxy_for_url
from kubernetes.aio import config as kube_config
from kubernetes.aio.client import ApiClient, Configuration
from yarl import URL

# Where a pod's service-account token is mounted (the client's own constant).
TOKEN_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/token"


class ApiConfigError(ValueError):
    """The `api.*` keys lead to no usable API server; the message names the key."""


async def make_api_client(url: str, kubeconfig: str, token_file: str = "") -> ApiClient:
    """An `ApiClient` for `url`, else for the kubeconfig at `kubeconfig`, else in-cluster.

    `url` (config `api.url`) is a plain http(s) URL such as the embedded API's;
    the only credential sent to it is the bearer token in `token_file` (config
    `api.token_file`, "" for none; read again whenever it changed, see
    `TokenFile`), and nothing is contacted yet. `kubeconfig` (config
    `api.kubeconfig`) is loaded with its current context and never written
    back (token refreshes stay in memory). `url` wins when both are set, as the
    config keys document; with both empty the pod's service account is used.
    A missing or unreadable kubeconfig, or no service account outside a pod,
    raises `ApiConfigError`. The caller closes the client (`await client.close()`).

    In-cluster, the service-account token file is read again whenever it
    changed (kubelet rotates bound tokens before they expire), checked by a
    stat before each request: a rotated token is used from the next request on.
    """
    if url:
        configuration = Configuration(host=url.rstrip("/"))
        if token_file:
            hook = TokenFile(token_file)
            # Read once now: the client asks the hook only for a key it already has.
            hook(configuration)
            # Typed None by the client, which calls it with the configuration.
            configuration.refresh_api_key_hook = hook  # type: ignore[assignment]
        return _client(configuration)
    configuration = Configuration()
    if kubeconfig:
        _require_file(kubeconfig)
        try:
            await kube_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig, client_configuration=configuration, persist_config=False
            )
        except kube_config.ConfigException as err:
            raise ApiConfigError(f"api.kubeconfig: {kubeconfig!r}: {err}") from err
    else:
        try:
            kube_config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration
            )
            # Typed None by the client, which calls it with the configuration.
            configuration.refresh_api_key_hook = TokenFile(TOKEN_FILE)  # type: ignore[assignment]
        except kube_config.ConfigException as err:
            raise ApiConfigError(
                f"api.url and api.kubeconfig are both empty, and the in-cluster "
                f"service account is unusable: {err}"
            ) from err
    return _client(configuration)


def _client(configuration: Configuration) -> ApiClient:
    """The client, its session told the environment's proxy for the server once."""
    session: dict[str, object] = {"trust_env": False}
    if configuration.proxy is None:  # a kubeconfig's proxy-url wins
        try:
            proxy, credentials = get_env_proxy_for_url(URL(configuration.host))
        except LookupError:
            pass
        else:
            if credentials is not None:
                proxy = proxy.with_user(credentials.login).with_password(credentials.password)
            session["proxy"] = proxy
    configuration.client_session_kwargs = session
    return ApiClient(configuration)


class TokenFile:
    """A `refresh_api_key_hook` that puts the token file's content in the configuration
    whenever the file changed (its inode, size or mtime: kubelet swaps a symlink).

    An unreadable or empty file keeps the token last read: the request then
    fails on its own, and the next one tries again.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._seen: tuple[int, int, int, int] | None = None

    def __call__(self, configuration: Configuration) -> None:
        try:
            info = os.stat(self.path)
            seen = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
            if seen == self._seen:
                return
            with open(self.path) as file:
                token = file.read().strip()
        except OSError:
            return
        if token:
            configuration.api_key["BearerToken"] = "bearer " + token
            self._seen = seen


def _require_file(path: str) -> None:
    # The kube loader reports a missing file as "Expected key current-context",
    # which sends people looking in the wrong place. A local stat, like the
    # loader's own read, does not need a thread.
    if not os.path.isfile(path):
        raise ApiConfigError(f"api.kubeconfig: {path!r}: no such file")
