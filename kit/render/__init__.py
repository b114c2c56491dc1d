"""Renderers: pure functions from one LaunchSpec to the shapes people deploy.

    kit.render.sglang   launch_command(spec) -> dict, render_sglang(spec) -> shell text
    kit.render.docker   run_kwargs(spec) -> docker SDK kwargs, docker_run_argv / docker_run_line
    kit.render.compose  compose_service / compose_document -> dicts, render_compose(specs) -> YAML
    kit.render.systemd  render_systemd(spec) -> a unit running the container in the foreground
    kit.render.lws      lws_manifests(spec, nodes=) -> dicts, render_lws(spec, nodes=) -> YAML

Import the module you need; this package imports nothing, so `kit validate` stays fast.
"""
