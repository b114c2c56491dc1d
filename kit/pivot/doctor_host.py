"""`kit doctor`'s container-limit and disk checks: /dev/shm, memlock, free disk, the model in the
Hugging Face cache, the port. The model-cache check reads kit.runtime.host.model_cache's scan.
"""

from __future__ import annotations

from kit.model.snapshots import describe_absent, fetch_hint
from kit.pivot.doctor_report import Check, ChecksBase, GiB, Status, _check, _gib, _size_bytes
from kit.proxyenv import NO_PROXY_FIX, loopback_gap


class HostChecks(ChecksBase):
    # -- container limits, disk, model, port ------------------------------------------------------

    def shm(self) -> Check:
        title = "/dev/shm size"
        ctx, facts = self.ctx, self.facts
        minimum = self.thresholds["shm_min_gib"] * GiB
        if ctx.target and not ctx.ipc_host:
            size = _size_bytes(ctx.shm_size)
            if size is None:
                status: Status = "pass" if self.cpu_target else "warn"
                return _check(
                    "shm",
                    title,
                    status,
                    "the container gets Docker's default 64 MB /dev/shm",
                    why="NCCL's shared-memory transport needs more" if status == "warn" else None,
                    fix="set container.ipc_host = true or container.shm_size in the profile"
                    if status == "warn"
                    else None,
                )
            status = "pass" if size >= minimum or self.cpu_target else "warn"
            return _check(
                "shm",
                title,
                status,
                f"the container's /dev/shm is {ctx.shm_size} (profile)",
                fix=None
                if status == "pass"
                else f"container.shm_size of at least {self.thresholds['shm_min_gib']:g}g",
            )
        if facts.shm_total is None:
            return _check("shm", title, "not-checked", "no /dev/shm", why="statvfs failed")
        where = "host /dev/shm (the container shares the host's IPC)" if ctx.ipc_host else "host /dev/shm"
        summary = f"{where}: {_gib(facts.shm_total)}, {_gib(facts.shm_free)} free"
        if (facts.shm_free or 0) < minimum and (self.gpus or ctx.device == "cuda"):
            return _check(
                "shm",
                title,
                "warn",
                summary,
                why="NCCL WARN 'failed to extend /dev/shm' ends the start-up",
                fix="enlarge /dev/shm (mount -o remount,size=16G /dev/shm) or free it",
            )
        return _check("shm", title, "pass", summary)

    def memlock(self) -> Check:
        title = "Locked-memory limit"
        ctx, host = self.ctx, self.facts.memlock
        if self.cpu_target:
            return _check(
                "memlock", title, "not-checked", "not needed", why=f"{ctx.target} runs on CPU (no NCCL)"
            )
        if ctx.memlock == -1:
            return _check("memlock", title, "pass", "the container sets memlock=-1 (profile's ulimits)")
        shown = "unlimited" if host == -1 else ("unknown" if host is None else _gib(host))
        summary = f"this shell's memlock: {shown}" + (
            "; the profile sets none (the container gets the engine's default)" if ctx.target else ""
        )
        if host == -1 or not (self.gpus or ctx.device == "cuda"):
            aside = "" if host == -1 else " (matters for NCCL on GPUs only)"
            return _check("memlock", title, "pass", summary + aside)
        return _check(
            "memlock",
            title,
            "warn",
            summary,
            why="NCCL pins host memory; a small limit fails or slows its set-up",
            fix="container.ulimits = { memlock = -1 } in the profile (docker run --ulimit memlock=-1)",
        )

    def disk(self) -> Check:
        title = "Free disk for the model"
        ctx, facts = self.ctx, self.facts
        if not ctx.hf_repo or not ctx.hf_cache:
            why = "no target named" if not ctx.target else f"the model ({ctx.model_path}) is inside the image"
            return _check("disk", title, "not-checked", "nothing to download", why=why)
        if facts.disk_free is None:
            return _check(
                "disk", title, "not-checked", f"cannot read {facts.disk_path}", why="statvfs failed"
            )
        need = (ctx.model_gib or 0) * GiB
        have = facts.model_cache.bytes if facts.model_cache and facts.model_cache.present else 0
        if facts.model_cache and facts.model_cache.complete:
            return _check("disk", title, "pass", f"the model is already in {ctx.hf_cache}")
        missing = max(0.0, need - have) * (1 + self.thresholds["disk_margin"])
        summary = f"{_gib(facts.disk_free)} free at {facts.disk_path}; the model needs {_gib(missing)} more"
        if facts.disk_free < missing:
            return _check(
                "disk",
                title,
                "fail",
                summary,
                why="the download fails part-way and the load never starts",
                fix=f"free {_gib(missing - facts.disk_free)} or point container.hf_cache at a larger disk",
            )
        return _check("disk", title, "pass", summary)

    def model_cache(self) -> Check:
        title = "Model in the Hugging Face cache"
        ctx, cache_state = self.ctx, self.facts.model_cache
        if not ctx.hf_repo or not ctx.hf_cache or cache_state is None:
            why = "no target named" if not ctx.target else f"the model ({ctx.model_path}) is inside the image"
            return _check("model-cache", title, "not-checked", "no cache to look in", why=why)
        details = {
            "hub": cache_state.hub,
            "snapshot": cache_state.snapshot,
            "files": cache_state.files,
            "bytes": cache_state.bytes,
            "missing": list(cache_state.missing[:20]),
            "incomplete_blobs": cache_state.incomplete_blobs,
            "revision": cache_state.revision,
            "others": list(cache_state.others[:5]),
        }
        download = fetch_hint(ctx.target, ctx.hf_repo, ctx.hf_revision)
        if cache_state.complete:
            return _check(
                "model-cache",
                title,
                "pass",
                f"{ctx.hf_repo}@{(cache_state.snapshot or '')[:12]} complete "
                f"({cache_state.files} files, {_gib(cache_state.bytes)})",
                details=details,
            )
        if not cache_state.present:
            return _check(
                "model-cache",
                title,
                "fail",
                describe_absent(cache_state),
                why="the server loads the pinned snapshot offline (--revision, HF_HUB_OFFLINE=1): "
                f"without its {ctx.model_gib:g} GiB it cannot start",
                fix=download,
                details=details,
            )
        gone = (
            f"{len(cache_state.missing)} file(s) missing (first: {cache_state.missing[0]})"
            if cache_state.missing
            else f"{cache_state.incomplete_blobs} interrupted download(s)"
        )
        return _check(
            "model-cache",
            title,
            "fail",
            f"{ctx.hf_repo} is incomplete: {gone}",
            why="the load fails or downloads again inside the start-up",
            fix=download,
            details=details,
        )

    def port(self) -> Check:
        title = "Server port free"
        ctx, facts = self.ctx, self.facts
        if ctx.port is None:
            return _check("port", title, "not-checked", "no port named", why="no target named")
        if facts.port_free is None:
            return _check("port", title, "not-checked", f"port {ctx.port}", why=facts.port_error)
        if facts.port_free:
            return _check("port", title, "pass", f"127.0.0.1:{ctx.port} is free ({self._port_users()})")
        return _check(
            "port",
            title,
            "warn",
            f"127.0.0.1:{ctx.port} is in use",
            why=self._port_users(),
            fix="stop what listens there (ss -ltnp) or set container.port",
        )

    def _port_users(self) -> str:
        """Who publishes the target on which host port: compose.yaml's service, the docker/systemd
        renders (the catalog's port), and kit up (a free one)."""
        ctx = self.ctx
        users = [f"compose.yaml publishes {ctx.target} on {ctx.compose_port}"] if ctx.compose_port else []
        if ctx.server_port is not None:
            users.append(f"kit render docker/systemd on {ctx.server_port}")
        return "; ".join([*users, "kit up picks a free one itself"])

    def server_proxy(self) -> Check:
        """SGLang's warm-up asks the server itself (127.0.0.1, or 0.0.0.0 read as 127.0.0.1) through
        `requests`, which takes the environment's proxy unless NO_PROXY covers the host."""
        title = "Proxy for the server's own requests"
        ctx, facts = self.ctx, self.facts
        why = (
            "SGLang's warm-up request to itself goes to the proxy, which refuses or cannot reach it; "
            "start-up fails after 120 s ('warmup error', res=<Response [403]>/[502]/[503])"
        )
        client = "~/.docker/config.json proxies.default"
        if ctx.target:
            env = {**facts.client_proxy_env, **dict(ctx.server_env)}
            gap = loopback_gap(env)
            if gap is None:
                return _check("server-proxy", title, "pass", "the container's env sends loopback direct")
            where = "the container's env (the target's env" + (
                f" and {client})" if facts.client_proxy_env else ")"
            )
            hosts = "127.0.0.1,localhost,0.0.0.0"
            fix = f"--set env.NO_PROXY={hosts} --set env.no_proxy={hosts}"
            if facts.client_proxy_env:
                fix += f", or add {hosts} to noProxy in {client}"
            return _check(
                "server-proxy",
                title,
                "warn",
                gap.describe(where),
                why=why,
                fix=fix,
                details={"proxy": gap.proxy},
            )
        found = [
            (where, gap)
            for where, env in (
                ("this shell's env (a server started from it: --unit/--pid)", facts.shell_proxy_env),
                (f"the Docker client's {client} (every container)", facts.client_proxy_env),
            )
            if (gap := loopback_gap(env)) is not None
        ]
        if not found:
            return _check(
                "server-proxy", title, "pass", "no proxy for loopback in this shell or Docker's client"
            )
        return _check(
            "server-proxy",
            title,
            "warn",
            "; ".join(gap.describe(where) for where, gap in found),
            why=why,
            fix=f"set {NO_PROXY_FIX} for the server (its unit's Environment=, its shell, or noProxy in "
            f"{client})",
            details={"shell": facts.shell_proxy_env, "docker_client": facts.client_proxy_env},
        )
