"""`kit image build`'s live progress and result line, shared with `kit up`, which builds a missing
pinned image the same way (a module of its own: kit/cli/image.py stays a list of commands)."""

from __future__ import annotations

import sys

from kit.output import err_console


def build_with_progress(manifest, options=None):
    """build_image with the live progress of `kit image build` on stderr; without OPTIONS, its
    defaults (the host pip's CA bundle and find-links folders): what `kit up` builds a missing image
    with."""
    from kit.images.build import BuildOptions, build_image
    from kit.images.pipconfig import pip_defaults

    if options is None:
        defaults = pip_defaults()
        options = BuildOptions(ca_bundle=defaults.cert, wheel_dirs=defaults.find_links)
    with _BuildProgress(options.tag or manifest.tag) as progress:
        return build_image(manifest, options, on_line=progress.line)


def built_line(result) -> str:
    from rich.markup import escape

    return (
        f"[bold green]built[/] {result.tag} ({result.image_id[:19]}) in {result.seconds:.0f} s; "
        f"torch from {result.torch_source}; {escape(result.base)}; log {result.log_path}"
    )


class _BuildProgress:
    """Which step, for how long, and its last output: a live status on a terminal (ticking every
    second even while a RUN step prints nothing); step lines, slow-step times and a heartbeat every
    30 s in plain logs (CI)."""

    def __init__(self, tag: str):
        import threading
        import time

        from kit.images.build import BuildSteps

        self.tag = tag
        self.tty = sys.stderr.isatty()
        self._clock = time.monotonic
        self.steps = BuildSteps(started=self._clock())
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick, name="kit-build-progress", daemon=True)
        self._status = err_console().status(f"building {tag}") if self.tty else None

    def __enter__(self):
        if self._status:
            self._status.__enter__()
        else:
            err_console().print(f"building {self.tag}", markup=False)
        self._ticker.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._ticker.join(timeout=2)
        if self._status:
            self._status.__exit__(*exc)

    def _tick(self) -> None:
        while not self._stop.wait(1.0):
            with self._lock:
                now = self._clock()
                if self._status:
                    self._status.update(f"building {self.tag}  {self.steps.status(now)}")
                elif beat := self.steps.heartbeat(now):
                    err_console().print(beat, markup=False, highlight=False)

    def line(self, text: str) -> None:
        with self._lock:
            now = self._clock()
            printed = self.steps.line(text, now)
            if text.startswith("kit: "):  # the kit's own word (its base, the locked system packages)
                err_console().print(text.strip(), markup=False, highlight=False)
            if self._status:
                self._status.update(f"building {self.tag}  {self.steps.status(now)}")
            else:
                for line in printed:
                    err_console().print(line, markup=False, highlight=False)
