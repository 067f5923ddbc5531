"""Images travel without a registry: `docker save` once on the controller, `docker load` on each host over SSH,
skipped on a host that already has the same image id."""
from __future__ import annotations

import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Mapping

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


def ship(image: str, hosts: Mapping[str, RemoteHost], log: Log = lambda _: None) -> list[str]:
    """Make `image` (same id) present on every host; returns the names of the hosts it was loaded on.
    Raises `EnvironmentProblem` / `CommandFailed` naming the host."""
    want = image_id(image)
    with ThreadPoolExecutor(max_workers=max(1, len(hosts))) as pool:
        have = dict(zip(hosts, pool.map(lambda h: remote_image_id(h, image), hosts.values())))
    missing = [name for name, got in have.items() if got != want]
    if not missing:
        log(f"image {image}: already on {', '.join(hosts)}")
        return []
    with tempfile.TemporaryFile(prefix="splitlab-image-") as archive:
        saved = subprocess.run(["docker", "save", image], stdout=archive, stderr=subprocess.PIPE, timeout=LOAD_TIMEOUT_S)
        if saved.returncode != 0:
            raise CommandFailed(["docker", "save", image], saved.returncode, saved.stderr.decode(errors="replace"))
        size_mb = archive.tell() / 1e6
        log(f"image {image}: loading {size_mb:.0f} MB on {', '.join(missing)}")

        def load(name: str) -> None:
            with open(f"/proc/self/fd/{archive.fileno()}", "rb") as stream:  # an own offset per host
                hosts[name].run_line(hosts[name].command_line(["docker", "load", "--quiet"]), input_stream=stream,
                                     timeout_s=LOAD_TIMEOUT_S, argv=["docker", "load"],
                                     hint="the host needs free disk for the image")
            if remote_image_id(hosts[name], image) != want:
                raise EnvironmentProblem(f"host {name}: image {image} has another id after docker load")

        with ThreadPoolExecutor(max_workers=len(missing)) as pool:
            list(pool.map(load, missing))
    return missing
