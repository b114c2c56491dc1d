"""LaunchSpec -> Kubernetes LeaderWorkerSet manifests: the path past one machine.

One group = one SGLang server over `nodes` pods (leader = node rank 0). Each pod gets the GPUs of
one node; the leader's address and each pod's index come from the variables LWS injects
(LWS_LEADER_ADDRESS, LWS_WORKER_INDEX), which Kubernetes expands in args as $(NAME). For multi-node,
TP spans the nodes: `kit render lws qwen-base --set tp=8 --set nnodes=2` (validate checks that TP =
GPUs x nodes).

A Service makes the server reachable cluster-wide, so this rendering always passes an API key:
SGLang's --api-key gets $(NAME), NAME coming from a Kubernetes Secret (never from this file).

Each pod also gets SYS_PTRACE (py-spy stacks), and the compile cache as a hostPath folder per node
(kit/runtime/compile_cache.py's MOUNT and variables), so a restarted pod does not compile again.
GPUs come from the NVIDIA device plugin (`nvidia.com/gpu: N`), which picks the devices itself.
"""

from __future__ import annotations

from typing import Any

from kit.dialects import load_dialect
from kit.render._yaml import dump
from kit.render.docker import cap_add, container_labels
from kit.runtime.compile_cache import ENV as COMPILE_ENV
from kit.runtime.compile_cache import MOUNT as COMPILE_MOUNT
from kit.runtime.flight_recorder_env import ENV as FLIGHT_RECORDER_ENV
from kit.spec import CONTAINER_HF_CACHE, LaunchSpec

DIST_PORT = 20000
HF_SECRET = "hf-token"
API_KEY_SECRET = "kit-api-key"
DEFAULT_API_KEY_ENV = "KIT_API_KEY"


def api_key_env(spec: LaunchSpec) -> str:
    return spec.api_key_env or DEFAULT_API_KEY_ENV


def nodes_of(spec: LaunchSpec) -> int:
    argv = list(spec.argv)
    flag = load_dialect(spec.dialect).flag("nnodes")
    name = flag.flag if flag else "--nnodes"
    return int(argv[argv.index(name) + 1]) if name in argv else 1


def _server_args(spec: LaunchSpec, nodes: int) -> list[str]:
    dialect = load_dialect(spec.dialect)
    args = list(spec.argv)
    if nodes > 1:
        flag = dialect.flag
        nnodes = flag("nnodes").flag if flag("nnodes") else "--nnodes"
        if nnodes not in args:
            args += [nnodes, str(nodes)]
        args += [
            flag("node_rank").flag if flag("node_rank") else "--node-rank",
            "$(LWS_WORKER_INDEX)",
            flag("dist_init_addr").flag if flag("dist_init_addr") else "--dist-init-addr",
            f"$(LWS_LEADER_ADDRESS):{DIST_PORT}",
        ]
    # Kubernetes expands $(NAME) from the container's env (the Secret below) when the pod starts.
    return [*args, "--api-key", f"$({api_key_env(spec)})"]


def _container(spec: LaunchSpec, nodes: int, leader: bool) -> dict[str, Any]:
    env = [
        {"name": k, "value": v} for k, v in sorted({**COMPILE_ENV, **FLIGHT_RECORDER_ENV, **spec.env}.items())
    ]
    key_env = api_key_env(spec)
    for key in spec.pass_env:
        if key == key_env:
            continue
        secret = {"name": HF_SECRET if key == "HF_TOKEN" else key.lower().replace("_", "-"), "key": "token"}
        env.append({"name": key, "valueFrom": {"secretKeyRef": {**secret, "optional": True}}})
    # Not optional: without the Secret the pod does not start, rather than serving without a key.
    env.append({"name": key_env, "valueFrom": {"secretKeyRef": {"name": API_KEY_SECRET, "key": "key"}}})
    container: dict[str, Any] = {
        "name": "sglang",
        "image": spec.image_ref,
        "command": _server_args(spec, nodes)[:3],
        "args": _server_args(spec, nodes)[3:],
        "env": env,
    }
    if spec.gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": spec.gpus}}
    mounts = [{"name": "dshm", "mountPath": "/dev/shm"}]
    if spec.hf_cache:
        mounts.append({"name": "hf-cache", "mountPath": CONTAINER_HF_CACHE})
    mounts.append({"name": "compile-cache", "mountPath": COMPILE_MOUNT})
    container["volumeMounts"] = mounts
    # py-spy reads the ranks' stacks only with SYS_PTRACE.
    container["securityContext"] = {"capabilities": {"add": cap_add(spec)}}
    if leader:
        container["ports"] = [{"containerPort": spec.port, "name": "http"}]
        start = int(sum(v for k, v in spec.timing.deadlines.items() if k != "first_token"))
        probe = {
            "httpGet": {"path": spec.health_path, "port": spec.port},
            "periodSeconds": 30,
            "timeoutSeconds": 25,
        }
        # startupProbe holds readiness and liveness off for the whole start-up budget.
        container["startupProbe"] = {**probe, "periodSeconds": 10, "failureThreshold": max(1, start // 10)}
        container["readinessProbe"] = probe
    return container


def _pod(spec: LaunchSpec, nodes: int, leader: bool) -> dict[str, Any]:
    volumes: list[dict[str, Any]] = [
        # NCCL's shared-memory transport; Kubernetes gives no ipc: host or shm_size otherwise.
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": spec.shm_size or "64Gi"}}
    ]
    if spec.hf_cache:
        volumes.append({"name": "hf-cache", "hostPath": {"path": spec.hf_cache, "type": "DirectoryOrCreate"}})
    volumes.append(
        {"name": "compile-cache", "hostPath": {"path": COMPILE_MOUNT, "type": "DirectoryOrCreate"}}
    )
    labels = {k.replace("io.kit.", "kit.io/"): v for k, v in container_labels(spec).items()}
    if leader:
        labels["role"] = "leader"  # the Service below selects the leader by it
    return {
        "metadata": {"labels": labels},
        "spec": {"containers": [_container(spec, nodes, leader)], "volumes": volumes},
    }


def lws_manifests(spec: LaunchSpec, *, nodes: int | None = None) -> list[dict[str, Any]]:
    from kit.render._values import require_one_line

    require_one_line(spec, "a LeaderWorkerSet manifest")
    nodes = nodes or nodes_of(spec)
    name = f"kit-{spec.target}"
    lws: dict[str, Any] = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {
                "size": nodes,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": _pod(spec, nodes, leader=True),
                "workerTemplate": _pod(spec, nodes, leader=False),
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {
            "selector": {"leaderworkerset.sigs.k8s.io/name": name, "role": "leader"},
            "ports": [{"name": "http", "port": spec.port, "targetPort": spec.port}],
        },
    }
    return [lws, service]


def render_lws(spec: LaunchSpec, *, nodes: int | None = None) -> str:
    docs = lws_manifests(spec, nodes=nodes)
    from kit.render.sglang import dialect_line

    header = [f"# {spec.target} on {spec.image_ref}, from `kit render lws`", f"# {dialect_line(spec)}"]
    header += [f"# {note}" for note in spec.notes]
    header += [
        f"# API key (required): kubectl create secret generic {API_KEY_SECRET} "
        "--from-literal=key=$(openssl rand -hex 32)",
        f"# HF_TOKEN: kubectl create secret generic {HF_SECRET} --from-literal=token=...",
        "# memlock/stack ulimits cannot be set per pod: the node's container runtime must allow them.",
        f"# Compile cache: {COMPILE_MOUNT} on each node (hostPath), kept across pod restarts.",
    ]
    if spec.gpu_devices:
        header.append(
            f"# --gpus {','.join(spec.gpu_devices)} does not apply here: the device plugin picks the GPUs."
        )
    if spec.hf_repo:
        header.append(
            f"# Weights: each node's {spec.hf_cache} holds {spec.hf_repo} (kit model fetch {spec.target} "
            "there); HF_HUB_OFFLINE=1 keeps pods from downloading."
        )
    body = "---\n".join(dump(doc) for doc in docs)
    return "\n".join(header) + "\n" + body
