"""Images travel without a registry: `docker save` once on the controller, `docker load` on each host over SSH,
skipped on a host that already has the same image id."""
from __future__ import annotations

import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Mapping, Sequence

from chaos.host.proc import run
from chaos.hosts.remote import RemoteHost
from node.errors import CommandFailed, EnvironmentProblem

LOAD_TIMEOUT_S = 600
Log = Callable[[str], None]


def image_id(image: str) -> str:
    """The local image id of `image`. Raises `EnvironmentProblem` when it is not here."""
    proc = run(["docker", "image", "inspect", "-f", "{{.Id}}", image], check=False)
    if proc.returncode != 0:
        raise EnvironmentProblem(f"image {image} is not on this machine", hint="run 'make images'")
    return proc.stdout.strip()


def remote_image_id(host: RemoteHost, image: str) -> str | None:
    proc = host.run(["docker", "image", "inspect", "-f", "{{.Id}}", image], check=False, timeout_s=30)
    return proc.stdout.strip() if proc.returncode == 0 else None


def ship(images: Sequence[str], hosts: Mapping[str, RemoteHost], log: Log = lambda _: None) -> list[str]:
    """Make every one of `images` (same id) present on every host; returns the names of the hosts they were
    loaded on. One `docker save` of all of them (layers they share travel once), loaded where one is missing.
    Raises `EnvironmentProblem` / `CommandFailed` naming the host."""
    want = {image: image_id(image) for image in images}

    def lacking(host: RemoteHost) -> bool:
        return any(remote_image_id(host, image) != ident for image, ident in want.items())

    with ThreadPoolExecutor(max_workers=max(1, len(hosts))) as pool:
        missing = [name for name, lacks in zip(hosts, pool.map(lacking, hosts.values())) if lacks]
    shown = ", ".join(images)
    if not missing:
        log(f"image(s) {shown}: already on {', '.join(hosts)}")
        return []
    with tempfile.TemporaryFile(prefix="splitlab-image-") as archive:
        saved = subprocess.run(["docker", "save", *images], stdout=archive, stderr=subprocess.PIPE,
                               timeout=LOAD_TIMEOUT_S)
        if saved.returncode != 0:
            raise CommandFailed(["docker", "save", *images], saved.returncode, saved.stderr.decode(errors="replace"))
        size_mb = archive.tell() / 1e6
        log(f"image(s) {shown}: loading {size_mb:.0f} MB on {', '.join(missing)}")

        def load(name: str) -> None:
            with open(f"/proc/self/fd/{archive.fileno()}", "rb") as stream:  # an own offset per host
                hosts[name].run_line(hosts[name].command_line(["docker", "load", "--quiet"]), input_stream=stream,
                                     timeout_s=LOAD_TIMEOUT_S, argv=["docker", "load"],
                                     hint="the host needs free disk for the image")
            if lacking(hosts[name]):
                raise EnvironmentProblem(f"host {name}: image(s) {shown} have another id after docker load")

        with ThreadPoolExecutor(max_workers=len(missing)) as pool:
            list(pool.map(load, missing))
    return missing
