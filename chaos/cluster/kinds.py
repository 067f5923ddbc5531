"""Node kinds: the implementations of the node contract (NODE_CONTRACT.md) a run can be made of.

A kind names its image (built by `splitlab images`, pinned by an environment variable while editing), how
`up` knows it is ready, and whether its nodes speak the authenticated wire (`auth`: they read the run's key,
`node.auth.AUTH_KEY_ENV`, an optional variable of the contract; `up --auth` and a scenario's `auth` are refused
for a kind that does not, `auth_refusal`). What else differs is told where it matters, not kept here: the admin
verbs a node does not offer it refuses with 400 (NODE_CONTRACT.md), the wire of a datagram its first bytes tell
(the shaper, the capture), the wire of a scenario's message faults its kind (`chaos.harness.load`), and what a node
records it says itself (`node_start.config.records`: a check that needs an event a node does not record answers
`unknown`). A run is made of one kind; a scenario's variants may differ in kind.

- `splitlab`: splitlab's own Python node (`node/`), every protocol model of the seeds.
- `jgroups`: the real JGroups 2.12.2 that Debian packages (`jgnode/`, `images/jgroups/`), with its own UNICAST,
  UNICAST2 and pbcast.NAKACK.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

from chaos.cluster import images
from node.errors import EnvironmentProblem, UsageError

Log = Callable[[str], None]


@dataclass(frozen=True)
class NodeKind:
    name: str
    image_env: str  # the variable that pins an image of this kind while editing
    tag: Callable[[], str]  # the image for the current sources
    build: Callable[[Log], str]
    # `up` also waits for one view of all members: JGroups' members hear each other's discovery before they joined
    ready_on_view: bool = False
    auth: bool = False  # its nodes sign and check their datagrams with the run's key (`splitlab up --auth`)

    def image(self) -> str:
        """The image a run of this kind uses: the pinned one if set, else the one for the current sources."""
        return os.environ.get(self.image_env) or self.tag()

    def built_image(self) -> str:
        """`image()`, which must exist. Raises EnvironmentProblem when it is not built."""
        image = self.image()
        if not images.image_exists(image):
            raise EnvironmentProblem(f"{self.name} node image {image} is not built",
                                     hint="run 'make images' (or 'splitlab images --kind " + self.name + "')")
        return image


KINDS: dict[str, NodeKind] = {
    "splitlab": NodeKind("splitlab", "SPLITLAB_NODE_IMAGE", images.node_tag, images.build_all, auth=True),
    "jgroups": NodeKind("jgroups", "SPLITLAB_JGROUPS_IMAGE", images.jgroups_tag, images.build_jgroups,
                        ready_on_view=True),
}
DEFAULT_KIND = "splitlab"


# The images of a multi-host run on the test bed (chaos.hosts.bed), which `build_kinds` builds when asked
BED_IMAGES = ("test-bed host", "shaper agent")


def build_kinds(names: list[str], log: Log, bed: bool = False) -> dict[str, str]:
    """Build the images of the kinds `names` (what is missing of each), the kinds side by side: each chain is
    mostly waiting (mmdebstrap's downloads and unpacking, `docker import`, `docker build`); both start from the
    base image, which the first to need it builds while the other waits (`images.build_base`). `bed`: also the
    `BED_IMAGES`, the test-bed hosts' image beside the kinds and the shaper agent's after the splitlab node image it
    is built on (built for it when not asked). Returns each kind's tag and each bed image's; the first failure is
    raised once every build has ended (leaving the pool waits for them all: none is left half-way in the
    background)."""
    with ThreadPoolExecutor(max_workers=max(1, len(names)) + 3 * bed, thread_name_prefix="images") as pool:
        futures = {name: pool.submit(KINDS[name].build, log) for name in names}
        if bed:
            node = futures.get(DEFAULT_KIND) or pool.submit(KINDS[DEFAULT_KIND].build, log)
            futures[BED_IMAGES[0]] = pool.submit(images.build_hostbed, log)
            futures[BED_IMAGES[1]] = pool.submit(lambda: (node.result(), images.build_agent(log))[1])
    return {name: future.result() for name, future in futures.items()}


def kind(name: str) -> NodeKind:
    """The kind called `name`. Raises UsageError listing the kinds."""
    try:
        return KINDS[name]
    except KeyError:
        raise UsageError(f"unknown node kind {name!r}; expected one of {', '.join(sorted(KINDS))}") from None


def auth_refusal(name: str) -> str | None:
    """Why a run of kind `name` cannot have the authenticated wire, or None when it can (or the kind is unknown:
    `kind` says so)."""
    item = KINDS.get(name)
    if item is None or item.auth:
        return None
    return (f"the authenticated wire (auth) is not offered by the {name} node kind: its nodes neither sign nor check "
            f"their datagrams (their own wire is not splitlab's); run it without auth, or use the "
            f"{', '.join(sorted(k for k, v in KINDS.items() if v.auth))} kind")


def of_image(image: str) -> NodeKind | None:
    """The kind whose image repository `image` is in (`splitlab-jgroups:...` -> jgroups), None for another."""
    repo = image.rsplit(":", 1)[0]
    for item in KINDS.values():
        if item.tag().rsplit(":", 1)[0] == repo:
            return item
    return None
