"""What runs in a lab's pods: each pod's holder, its `cmd` and its `exec` commands.

Every pod has a holder (holder.py): its hostname, files and PID namespace.
A pod whose lab file gives software (control/model/podspec.py, kept in the state's
`software` by pod key) also runs:

- `cmd`, started right after the holder, as the process `cmd/<ns>/<pod>` of
  the state, its output in `logs/cmd-<ns>-<pod>.log` (`lab logs`);
- each `exec`, in order, by `run_exec` once the pod's links are up; the first
  that fails (exit status not 0, or still running after EXEC_TIMEOUT) raises
  LabError with its output. Their output goes to `logs/exec-<ns>-<pod>.log`.

A pod with an `image` runs it as a container (containerd.py) in place of
`cmd`: it joins the holder's namespaces but has the image's files, with the
binds, and its own processes; its `exec` commands and `lab exec` enter the
container's namespaces with its environment, and its output goes to the
same log.

The holder is recorded as `pod/<ns>/<pod>`. `stop` stops the pod's container
or `cmd`, then its holder, whose end stops whatever else the pod ran; all by
PID, as every lab process (processes.py). A KNE config file is written under
the lab directory's `pods/` and bound into the pod.
"""

from __future__ import annotations

import shlex
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from meshwire.control.model.podspec import Bind, PodSpec
from meshwire.tools.lab import containerd, holder, processes
from meshwire.tools.lab.errors import LabError
from meshwire.tools.lab.lab_names import netns_path
from meshwire.tools.lab.state import LabDir, LabState, PodRecord, ProcessRecord

# Seconds one `exec` command may run: they configure, they do not serve.
EXEC_TIMEOUT = 120.0
# Holders started at once: each is a fork and an exec, then a wait on the kernel.
PARALLEL = 16
# Characters of a failed exec's output in its error.
SHOWN_OUTPUT = 2000


def holder_role(pod: PodRecord) -> str:
    return f"pod/{pod.key}"


def cmd_role(pod: PodRecord) -> str:
    return f"cmd/{pod.key}"


def is_pod_process(record: ProcessRecord) -> bool:
    """Whether `record` is a pod's holder or `cmd` (not a process of the lab's own)."""
    return record.role.startswith(("pod/", "cmd/"))


def spec_of(state: LabState, pod: PodRecord) -> PodSpec:
    raw = state.software.get(pod.key)
    return PodSpec.from_dict(raw) if raw else PodSpec()


def running_holder(state: LabState, pod: PodRecord) -> ProcessRecord:
    """The pod's holder; LabError when it does not run (the pod is being restarted, or
    was started without one)."""
    record = state.process(holder_role(pod))
    if record is None or not processes.is_running(record):
        raise LabError(f"pod {pod.key}: not running (no holder of its namespaces)")
    return record


def pod_command(
    state: LabState, pod: PodRecord, command: list[str] | tuple[str, ...]
) -> tuple[list[str], dict[str, str]]:
    """The argv and environment that run `command` in the pod: in its container's
    namespaces with the container's environment, or in its holder's; LabError when the
    pod does not run."""
    spec = spec_of(state, pod)
    if spec.image:
        container = state.containers.get(pod.key)
        if container is None or not containerd.is_running(container):
            raise LabError(f"pod {pod.key}: not running (its container is not running)")
        return holder.exec_argv_pid(container.pid, command), dict(container.env)
    running = running_holder(state, pod)
    return holder.exec_argv(running, command), holder.pod_env(pod.name, spec.env)


def start(lab: LabDir, state: LabState, pod: PodRecord) -> None:
    """The pod's holder, then its container or `cmd` if it has one; each recorded as it
    starts."""
    state.processes.append(_start_holder(lab, state, pod))
    lab.save(state)
    _start_main(lab, state, pod)


def start_all(lab: LabDir, state: LabState, records: list[PodRecord]) -> None:
    """`start` for many pods, PARALLEL holders at once, the state saved once a batch.

    Each batch's holders are recorded together once all of it has started (a crash
    in between leaves at most PARALLEL holders unrecorded); one write per pod would
    make a 1,000-pod lab rewrite its state thousands of times."""
    with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        for first in range(0, len(records), PARALLEL):
            batch = records[first : first + PARALLEL]
            futures = [pool.submit(_start_holder, lab, state, pod) for pod in batch]
            errors: list[LabError] = []
            for future in futures:
                error = future.exception()
                if error is None:
                    state.processes.append(future.result())
                elif isinstance(error, LabError):
                    errors.append(error)
                else:
                    raise error
            lab.save(state)
            if errors:
                raise errors[0]
    for pod in records:
        _start_main(lab, state, pod)


def run_exec(lab: LabDir, state: LabState, pod: PodRecord) -> None:
    """Each `exec` of the pod in order; LabError with the output of the first that fails."""
    spec = spec_of(state, pod)
    if not spec.exec:
        return
    log = lab.log(f"exec/{pod.key}")
    log.parent.mkdir(parents=True, exist_ok=True)
    for index, command in enumerate(spec.exec, start=1):
        shown = f"pod {pod.key}: exec {index} of {len(spec.exec)} `{shlex.join(command)}`"
        argv, env = pod_command(state, pod, command)
        try:
            done = subprocess.run(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=EXEC_TIMEOUT,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise LabError(f"{shown}: still running after {EXEC_TIMEOUT:.0f}s: "
                           f"{_text(exc.output)}") from None  # fmt: skip
        output = _text(done.stdout)
        with open(log, "a") as out:
            out.write(f"$ {shlex.join(command)}\n{output}")
        if done.returncode != 0:
            raise LabError(f"{shown}: exit status {done.returncode}: {output.strip()}")


def stop(lab: LabDir, state: LabState, pod: PodRecord) -> None:
    """Stop the pod's container or `cmd`, and its holder (so every process of the pod);
    forget them."""
    containerd.stop(lab, state, pod)
    roles = (cmd_role(pod), holder_role(pod))
    for record in [r for r in state.processes if r.role in roles]:
        processes.stop(record)
    state.processes = [r for r in state.processes if r.role not in roles]
    lab.save(state)


def process_states(state: LabState, pod: PodRecord) -> dict[str, str]:
    """`running` or `exited` for the pod's holder (`pod`) and its `container` or `cmd`, if
    any."""
    out = {}
    for what, role in (("pod", holder_role(pod)), ("cmd", cmd_role(pod))):
        record = state.process(role)
        if record is not None:
            out[what] = "running" if processes.is_running(record) else "exited"
    container = state.containers.get(pod.key)
    if container is not None:
        out["container"] = "running" if containerd.is_running(container) else "exited"
    return out


def main_running(state: LabState, pod: PodRecord) -> bool:
    """Whether the pod's container or `cmd` runs."""
    container = state.containers.get(pod.key)
    if container is not None:
        return containerd.is_running(container)
    record = state.process(cmd_role(pod))
    return record is not None and processes.is_running(record)


def _start_holder(lab: LabDir, state: LabState, pod: PodRecord) -> ProcessRecord:
    spec = spec_of(state, pod)
    # An image's container takes the binds; its holder keeps only the pod's namespaces.
    binds = [] if spec.image else _binds(lab, pod, spec)
    role = holder_role(pod)
    return holder.start_holder(role, Path(netns_path(pod.netns)), pod.name, binds, lab.log(role))


def _start_main(lab: LabDir, state: LabState, pod: PodRecord) -> None:
    spec = spec_of(state, pod)
    if spec.image:
        running = running_holder(state, pod)
        binds = _binds(lab, pod, spec)
        containerd.start(lab, state, pod, spec, running.pid, binds, logs(lab, pod))
        return
    if not spec.cmd:
        return
    running = running_holder(state, pod)
    role = cmd_role(pod)
    argv = holder.exec_argv(running, spec.cmd)
    env = holder.pod_env(pod.name, spec.env)
    state.processes.append(processes.start(role, argv, lab.log(role), env=env))
    lab.save(state)


def _binds(lab: LabDir, pod: PodRecord, spec: PodSpec) -> list[Bind]:
    """The lab file's binds, then one per file it writes into the pod."""
    binds = list(spec.binds)
    for index, file in enumerate(spec.files):
        directory = lab.path / "pods" / f"{pod.namespace}.{pod.name}" / str(index)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / file.name).write_text(file.data)
        binds.append(Bind(str(directory), file.directory))
    return binds


def _text(output: bytes | str | None) -> str:
    if output is None:
        return ""
    text = output.decode(errors="replace") if isinstance(output, bytes) else output
    return text[-SHOWN_OUTPUT:]


def logs(lab: LabDir, pod: PodRecord) -> Path:
    """Where the output of the pod's `cmd` or container goes."""
    return lab.log(cmd_role(pod))
