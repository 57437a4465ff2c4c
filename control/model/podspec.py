"""What a lab file says about the software of its pods: command, exec, binds, env, files.

Read, per node, from a containerlab file:

- `cmd`: the pod's main command, a string split as a shell splits words (no
  shell runs it: write `sh -c '...'` for one) or a list of words;
- `exec`: commands run in order once the pod's links are up, each a string
  split the same way;
- `binds`: `HOST:POD` or `HOST:POD:ro` (`:rw` is the default); HOST relative to
  the lab file's directory, POD absolute;
- `env`: a mapping of variable to value, for `cmd`, `exec` and `lab exec`;
- `image`: what the pod runs through containerd instead of this host's files:
  an image reference (`frr:8`, looked up in containerd), or an archive
  (`docker save` / OCI tar) the lab imports: a path ending in `.tar`,
  `.tar.gz` or `.tgz`, or starting with `/`, `./` or `../`, relative to the
  lab file's directory, that must exist. `cmd` then replaces the image's Cmd
  and keeps its Entrypoint, as `docker run IMAGE CMD` does.

`topology.defaults` and `topology.kinds.<kind>` give the same fields to many
nodes, as in containerlab: a node's `cmd`, `exec` and `image` replace theirs, its
`binds` come after theirs, its `env` is merged over theirs.

From a KNE topology (YAML, JSON or text protobuf), per node, in `config`:
`command` and `args` (together the main command), `env`, `image` (as
containerlab's; `command` replaces the image's Entrypoint and Cmd, `args`
alone its Cmd, as in Kubernetes), and a file the lab
writes into the pod: `config_path` (a directory in the pod), `config_file`
(the file's name there) and its content, inline in `data` or from `file` (a
path relative to the topology file). The directory is replaced in the pod by
one holding that file alone, as a Kubernetes ConfigMap volume would be.

meshnet Topology YAML describes links only: it has no such fields, and its
pods run nothing.

Every other field of a node (a vendor's `kind`, KNE's `vendor`, `labels`, ...)
is not run: `load_software` reports each once, naming the nodes that have
it, in `PodSoftware.warnings`; nothing is dropped silently. Wrongly shaped
fields raise LoadError naming the file, line and field.
"""

from __future__ import annotations

import shlex
from dataclasses import asdict, dataclass, field
from pathlib import Path as FilePath
from typing import Any

from meshwire.control.model.containerlab import looks_like_containerlab
from meshwire.control.model.kne import looks_like_kne
from meshwire.control.model.labfile import LoadError, Origin, Path
from meshwire.control.model.load import TEXTPROTO_SUFFIXES
from meshwire.control.model.textproto import Message, Scalar, TextProtoError, parse
from meshwire.control.model.yamlfile import read_documents

# containerlab node fields this module reads; `kind` picks `topology.kinds`.
CLAB_READ = ("cmd", "exec", "binds", "env", "image", "kind")
# containerlab kinds that are a Linux pod (bridges are no pod: containerlab.py).
LINUX_KINDS = ("linux", "bridge", "ovs-bridge")
CLAB_TOPOLOGY_READ = ("nodes", "links", "defaults", "kinds")
CLAB_TOP_READ = ("name", "topology")
KNE_NODE_READ = ("name", "config")
KNE_CONFIG_READ = (
    "command", "args", "env", "image", "config_path", "config_file", "data", "file"
)  # fmt: skip
KNE_TOP_READ = ("name", "nodes", "links")
NOT_RUN = "not run by meshwire"
# An `image` naming an archive the lab imports, not a reference to look up.
ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz")
ARCHIVE_PREFIXES = ("/", "./", "../")


@dataclass(frozen=True, slots=True)
class Bind:
    host: str  # absolute
    pod: str  # absolute
    read_only: bool = False

    def spec(self) -> str:
        """`HOST:POD[:ro]`, as meshwire-pod takes it."""
        return f"{self.host}:{self.pod}" + (":ro" if self.read_only else "")


@dataclass(frozen=True, slots=True)
class PodFile:
    """A file the lab writes, bound into the pod as the only file of `directory`."""

    directory: str
    name: str
    data: str


@dataclass(frozen=True, slots=True)
class PodSpec:
    cmd: tuple[str, ...] = ()
    exec: tuple[tuple[str, ...], ...] = ()
    binds: tuple[Bind, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    files: tuple[PodFile, ...] = ()
    # What containerd runs the pod from: an image reference, or an archive's absolute
    # path (`is_archive`); "" runs the pod on this host's files.
    image: str = ""
    # With an image: `cmd` replaces only the image's Cmd (containerlab's `cmd`, KNE's
    # `args` alone), or its Entrypoint too (KNE's `command`).
    keeps_entrypoint: bool = True

    @property
    def image_is_archive(self) -> bool:
        return self.image.startswith("/")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PodSpec:
        return cls(
            cmd=tuple(data.get("cmd", ())),
            exec=tuple(tuple(c) for c in data.get("exec", ())),
            binds=tuple(Bind(**b) for b in data.get("binds", ())),
            env=tuple((k, v) for k, v in data.get("env", ())),
            files=tuple(PodFile(**f) for f in data.get("files", ())),
            image=data.get("image", ""),
            keeps_entrypoint=data.get("keeps_entrypoint", True),
        )


@dataclass(slots=True)
class PodSoftware:
    """The specs of the nodes that have any, by node name, and one warning per field not run."""

    specs: dict[str, PodSpec] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def load_software(path: str | FilePath) -> PodSoftware:
    """The pods' software in the lab file at `path` (see module doc); raises LoadError."""
    source = str(path)
    try:
        text = FilePath(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise LoadError(f"{source}: cannot read: {error}", source) from error
    return software_from_text(text, source, FilePath(path).resolve().parent)


def software_from_text(text: str, source: str, base: FilePath) -> PodSoftware:
    """As `load_software`, for `text`; `base` is the directory relative paths start from."""
    if source.endswith(TEXTPROTO_SUFFIXES):
        return _kne_textproto(text, source, base)
    try:
        documents = read_documents(text, source)
    except LoadError:
        return _kne_textproto(text, source, base)
    if len(documents) != 1 or not isinstance(documents[0].data, dict):
        return PodSoftware()  # meshnet objects: links only
    data, origin = documents[0].data, Origin(source, documents[0].locator)
    if "kind" in data:
        return PodSoftware()
    if looks_like_containerlab(data):
        return _containerlab(data, origin, base)
    if any(isinstance(data.get(k), dict) for k in ("nodes", "links")):
        return _kne_textproto(text, source, base)
    if looks_like_kne(data):
        return _kne(data, origin, base)
    return PodSoftware()


class _Unread:
    """Fields not run, each reported once with the nodes that have it."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.fields: dict[str, list[str]] = {}

    def add(self, place: str, node: str = "") -> None:
        nodes = self.fields.setdefault(place, [])
        if node and node not in nodes:
            nodes.append(node)

    def warnings(self) -> list[str]:
        out = []
        for place, nodes in self.fields.items():
            where = f" (nodes {', '.join(nodes)})" if nodes else ""
            out.append(f"{self.source}: {place}{where}: {NOT_RUN}")
        return out


def _containerlab(data: dict[str, Any], origin: Origin, base: FilePath) -> PodSoftware:
    unread = _Unread(origin.source)
    for key in data:
        if key not in CLAB_TOP_READ:
            unread.add(str(key))
    topology = data["topology"]
    for key in topology:
        if key not in CLAB_TOPOLOGY_READ:
            unread.add(f"topology.{key}")
    defaults = _mapping(topology.get("defaults"), ("topology", "defaults"), origin)
    kinds = _mapping(topology.get("kinds"), ("topology", "kinds"), origin)
    nodes = _mapping(topology.get("nodes"), ("topology", "nodes"), origin)
    specs: dict[str, PodSpec] = {}
    for name, raw in nodes.items():
        path: Path = ("topology", "nodes", name)
        node = _mapping(raw, path, origin)
        kind = node.get("kind", defaults.get("kind"))
        if kind in ("bridge", "ovs-bridge"):
            continue
        layers: list[tuple[Path, dict[str, Any]]] = [(("topology", "defaults"), defaults)]
        if isinstance(kind, str) and kind in kinds:
            kind_path: Path = ("topology", "kinds", kind)
            layers.append((kind_path, _mapping(kinds[kind], kind_path, origin)))
        layers.append((path, node))
        spec = _clab_node(layers, origin, base)
        for layer_path, layer in layers:
            prefix = "" if layer_path == path else _place(layer_path) + "."
            for key in layer:
                if key not in CLAB_READ:
                    unread.add(f"{prefix}{key}", name)
        if isinstance(kind, str) and kind not in LINUX_KINDS:
            unread.add(f"kind {kind}", name)
        if spec != PodSpec():
            specs[name] = spec
    return PodSoftware(specs, unread.warnings())


def _place(path: Path) -> str:
    return ".".join(str(p) for p in path)


def _clab_node(
    layers: list[tuple[Path, dict[str, Any]]], origin: Origin, base: FilePath
) -> PodSpec:
    cmd: tuple[str, ...] = ()
    execs: tuple[tuple[str, ...], ...] = ()
    binds: list[Bind] = []
    env: dict[str, str] = {}
    image = ""
    for path, layer in layers:
        if "image" in layer:
            image = _image(layer["image"], (*path, "image"), origin, base)
        if "cmd" in layer:
            cmd = _words(layer["cmd"], (*path, "cmd"), origin)
        if "exec" in layer:
            execs = tuple(
                _words(c, (*path, "exec", i), origin)
                for i, c in enumerate(_list(layer["exec"], (*path, "exec"), origin))
            )
        for i, raw in enumerate(_list(layer.get("binds"), (*path, "binds"), origin)):
            binds.append(_bind(raw, (*path, "binds", i), origin, base))
        env.update(_env(layer.get("env"), (*path, "env"), origin))
    return PodSpec(cmd, execs, tuple(binds), tuple(env.items()), image=image)


def _image(raw: Any, path: Path, origin: Origin, base: FilePath) -> str:
    """A reference as written, or an archive's absolute path (which must exist)."""
    if not isinstance(raw, str) or not raw or any(c.isspace() for c in raw):
        raise origin.error(path, f"expected an image reference or archive path, got {raw!r}")
    if not (raw.endswith(ARCHIVE_SUFFIXES) or raw.startswith(ARCHIVE_PREFIXES)):
        return raw
    archive = (base / raw).resolve()
    if not archive.is_file():
        raise origin.error(path, f"image archive {archive}: no such file")
    return str(archive)


def _bind(raw: Any, path: Path, origin: Origin, base: FilePath) -> Bind:
    if not isinstance(raw, str):
        raise origin.error(path, f'expected "HOST:POD[:ro]", got {raw!r}')
    parts = raw.split(":")
    mode = parts.pop() if len(parts) == 3 else "rw"
    if len(parts) != 2 or not all(parts) or mode not in ("ro", "rw"):
        raise origin.error(path, f'expected "HOST:POD[:ro]", got {raw!r}')
    host, pod = parts
    if not pod.startswith("/"):
        raise origin.error(path, f"the pod path {pod!r} must be absolute")
    return Bind(str((base / host).resolve()), pod, mode == "ro")


def _words(raw: Any, path: Path, origin: Origin) -> tuple[str, ...]:
    if isinstance(raw, list) and raw and all(isinstance(w, str) for w in raw):
        return tuple(raw)
    if not isinstance(raw, str):
        raise origin.error(path, f"expected a command (a string or a list of strings), got {raw!r}")
    try:
        words = tuple(shlex.split(raw))
    except ValueError as error:
        raise origin.error(path, f"command {raw!r}: {error}") from None
    if not words:
        raise origin.error(path, "the command is empty")
    return words


def _env(raw: Any, path: Path, origin: Origin) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in _mapping(raw, path, origin).items():
        if not isinstance(key, str) or not key or "=" in key:
            raise origin.error(path, f"variable name {key!r} is not valid")
        if isinstance(value, (dict, list)) or value is None:
            raise origin.error((*path, key), f"expected a value, got {value!r}")
        out[key] = str(value).lower() if isinstance(value, bool) else str(value)
    return out


def _mapping(raw: Any, path: Path, origin: Origin) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise origin.error(path, f"expected a mapping, got {raw!r}")
    return raw


def _list(raw: Any, path: Path, origin: Origin) -> list[Any]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise origin.error(path, f"expected a list, got {raw!r}")
    return raw


def _kne(data: dict[str, Any], origin: Origin, base: FilePath) -> PodSoftware:
    unread = _Unread(origin.source)
    for key in data:
        if key not in KNE_TOP_READ:
            unread.add(str(key))
    specs: dict[str, PodSpec] = {}
    for index, raw in enumerate(_list(data.get("nodes"), ("nodes",), origin)):
        path: Path = ("nodes", index)
        node = _mapping(raw, path, origin)
        name = node.get("name")
        if not isinstance(name, str):
            continue  # kne.py reports it
        for key in node:
            if key not in KNE_NODE_READ:
                unread.add(str(key), name)
        config = _mapping(node.get("config"), (*path, "config"), origin)
        for key in config:
            if key not in KNE_CONFIG_READ:
                unread.add(f"config.{key}", name)
        spec = _kne_config(config, (*path, "config"), origin, base)
        if spec != PodSpec():
            specs[name] = spec
    return PodSoftware(specs, unread.warnings())


def _kne_config(config: dict[str, Any], path: Path, origin: Origin, base: FilePath) -> PodSpec:
    words: list[str] = []
    for key in ("command", "args"):
        for i, word in enumerate(_list(config.get(key), (*path, key), origin)):
            if not isinstance(word, str):
                raise origin.error((*path, key, i), f"expected a string, got {word!r}")
            words.append(word)
    env = _env(config.get("env"), (*path, "env"), origin)
    image = _image(config["image"], (*path, "image"), origin, base) if "image" in config else ""
    files: tuple[PodFile, ...] = ()
    if "data" in config and "file" in config:
        raise origin.error(path, "give data or file, not both")
    if "data" in config or "file" in config:
        files = (_kne_file(config, path, origin, base),)
    keeps_entrypoint = not config.get("command")
    return PodSpec(tuple(words), (), (), tuple(env.items()), files, image, keeps_entrypoint)


def _kne_file(config: dict[str, Any], path: Path, origin: Origin, base: FilePath) -> PodFile:
    directory, name = config.get("config_path"), config.get("config_file")
    if not isinstance(directory, str) or not directory.startswith("/"):
        raise origin.error(
            (*path, "config_path"), "required with data or file: an absolute directory"
        )
    if not isinstance(name, str) or not name or "/" in name:
        raise origin.error((*path, "config_file"), "required with data or file: a file name")
    if "data" in config:
        data = config["data"]
        if not isinstance(data, str):
            raise origin.error((*path, "data"), f"expected text, got {data!r}")
        return PodFile(directory, name, data)
    file = config["file"]
    if not isinstance(file, str) or not file:
        raise origin.error((*path, "file"), f"expected a path, got {file!r}")
    try:
        text = (base / file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise origin.error((*path, "file"), f"cannot read {base / file}: {error}") from None
    return PodFile(directory, name, text)


class _NoLines:
    def line(self, path: Path) -> int | None:
        return None


def _kne_textproto(text: str, source: str, base: FilePath) -> PodSoftware:
    """KNE's text protobuf, read as its YAML shape (repeated fields as lists, maps as mappings)."""
    try:
        message = parse(text)
    except TextProtoError as error:
        raise LoadError(f"{source}:{error.line}: {error.reason}", source, error.line) from error
    data = _plain(message, lists={"nodes", "links", "command", "args"}, maps={"env"})
    return _kne(data, Origin(source, _NoLines()), base)


def _plain(message: Message, lists: set[str], maps: set[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in message.fields:
        value = (
            item.value.text if isinstance(item.value, Scalar) else _plain(item.value, lists, maps)
        )
        if item.name in lists:
            out.setdefault(item.name, []).append(value)
        elif item.name in maps and isinstance(value, dict):
            out.setdefault(item.name, {})[value.get("key", "")] = value.get("value", "")
        else:
            out[item.name] = value
    return out
