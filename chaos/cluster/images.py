"""Building splitlab's images without a container registry.

- Base image: Debian bookworm by mmdebstrap (minbase plus `images/base/packages.txt`; debootstrap's successor in
  Debian, which downloads in parallel and writes a tarball: 37 s -> 16 s here), imported with `docker import`,
  tagged `splitlab-base:<hash of its inputs>` so it is rebuilt only when they change. The
  Debian mirror is read from the host's apt configuration (or `DEBIAN_MIRROR`) at build time.
- Node image: `images/node/Dockerfile` on top of the base, with the node package and its Python dependencies
  (the `node` extra of pyproject.toml) unpacked on the host from wheels, so the build itself needs no network,
  and the node's compiled build (`chaos.cluster.compiled`, made on the host), which its nodes run.
  Tagged `splitlab-node:<hash>` and `splitlab-node:latest`.

- Shaper agent image (`images/agent/`): the node image plus the NFQUEUE shaper (`chaos.net.shaper` and what it
  imports, `AGENT_MODULES`) and scapy (a pure-Python wheel, fetched by the controller's pip); it runs the shaper
  inside a node's namespace on another host of a multi-host run (chaos.net.shaper.remote).
  Tagged `splitlab-agent:<hash>`; built on demand by `up --inventory`, or by `splitlab images --bed`.
- JGroups node image (`images/jgroups/`): a base of its own (`images/jgbase/`: the base image plus Debian's Java
  runtime and `libjgroups-java`, the real JGroups 2.12.2, installed by apt in a `docker build`; tagged
  `splitlab-jgbase:<hash>`), the JGroups node (`jgnode/`, which reuses the
  node's control API, history and workloads from `node/`) with its Python dependencies (the `node` and `jgroups`
  extras: JPype drives the JVM) and the trace protocol (`images/jgroups/java/`), compiled here with the host's
  javac against the image's own jar. Tagged `splitlab-jgroups:<hash>`; built by `make images-all`.
- Test-bed host image (`images/hostbed/`): the base plus Debian's docker.io and openssh-server, for the multi-host
  test bed (`chaos.hosts.bed`); built on demand or by `splitlab images --bed`, tagged `splitlab-hostbed:<hash>`.

`BASE_IMAGE=python:3.11-slim` skips mmdebstrap for users who have a registry; `SPLITLAB_NODE_IMAGE=<tag>`
makes runs use that image instead of the one for the current sources.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
import threading
import tomllib
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from chaos.cluster import compiled
from chaos.host.proc import run
from node.errors import EnvironmentProblem

REPO = Path(__file__).resolve().parents[2]
SUITE = "bookworm"
VARIANT = "minbase"
RECIPE_VERSION = "2"  # bump when the base recipe changes in a way the hashed inputs do not show (2: mmdebstrap)
# What dpkg leaves out of every package it installs in the base, and in the images built on it (mmdebstrap keeps the
# setting in /etc/dpkg/dpkg.cfg.d/); apt's package lists and downloaded packages mmdebstrap removes by itself
TRIM_PATHS = ("usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale")
# mmdebstrap's hook that merges /usr before the first package is installed, as bookworm's debootstrap does (without
# it, apt satisfies init-system-helpers' "usrmerge | usr-is-merged" with usrmerge, which brings Perl: 116 -> 163 MB)
MERGED_USR_HOOKS = "/usr/share/mmdebstrap/hooks/merged-usr"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
NODE_REPO = "splitlab-node"
BASE_REPO = "splitlab-base"
JGROUPS_REPO = "splitlab-jgroups"
JGROUPS_BASE_REPO = "splitlab-jgbase"
HOSTBED_REPO = "splitlab-hostbed"
AGENT_REPO = "splitlab-agent"
# The agent's processes (the shaper, the wire agent) and what they import from this repository besides `node`
# (the JGroups codec among them: message faults on the real JGroups' wire)
# (tests/unit/test_agent_image.py checks it against a fresh interpreter): the agent image carries these and
# nothing else of the controller.
AGENT_ENTRIES = ("chaos.net.shaper.__main__", "chaos.wire.agent")
AGENT_MODULES = ("chaos/__init__.py", "chaos/faults/__init__.py", "chaos/faults/grudge.py",
                 "chaos/faults/msgrules.py", "chaos/host/__init__.py", "chaos/host/netns.py", "chaos/host/priority.py",
                 "chaos/host/proc.py", "chaos/net/__init__.py", "chaos/net/shaper", "chaos/wire/__init__.py",
                 "chaos/wire/agent.py", "chaos/wire/capture.py", "chaos/wire/dissect.py", "chaos/wire/inject.py",
                 "chaos/wire/probe.py", "jgnode/__init__.py", "jgnode/grammar.py", "jgnode/layout.py",
                 "jgnode/reader.py", "jgnode/wire.py")
# What they import lazily: the scapy dissector, once a message rule exists.
AGENT_LAZY_IMPORTS = ("chaos.wire.dissect",)
BASE_PACKAGES = "images/base/packages.txt"
# The images built on the base by a `docker build` of their folder (`build_layer`), each tagged by the base's tag and
# the folder's files
JGROUPS_BASE_DIR = "images/jgbase"
HOSTBED_DIR = "images/hostbed"
# One bootstrap of the base at a time in this process: `splitlab images --kind all` builds both kinds' chains at
# once, and both start from the base
_BASE_BUILD = threading.Lock()

Log = Callable[[str], None]


def _sha(parts: list[bytes]) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()[:12]


def base_packages(repo: Path = REPO) -> list[str]:
    text = (repo / BASE_PACKAGES).read_text()
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]


def dependencies(extra: str, repo: Path = REPO) -> list[str]:
    """The packages of one optional-dependencies extra of pyproject.toml."""
    with open(repo / "pyproject.toml", "rb") as fh:
        project = tomllib.load(fh)["project"]
    return list(project["optional-dependencies"][extra])


def node_dependencies(repo: Path = REPO) -> list[str]:
    """The node's runtime dependencies: the `node` extra of pyproject.toml."""
    return dependencies("node", repo)


def base_tag(repo: Path = REPO) -> str:
    """The base image to build on: $BASE_IMAGE if set, else `splitlab-base:<hash of the recipe>`."""
    if (given := os.environ.get("BASE_IMAGE")) is not None:
        return given
    inputs = [RECIPE_VERSION, SUITE, VARIANT, *TRIM_PATHS, *base_packages(repo)]
    return f"{BASE_REPO}:{_sha([s.encode() for s in inputs])}"


def node_tag(repo: Path = REPO) -> str:
    """`splitlab-node:<hash>` of the base tag, the Dockerfile, the node's dependencies, its sources and its
    compiled build's key."""
    parts = [base_tag(repo).encode(), (repo / "images/node/Dockerfile").read_bytes(),
             "\n".join(node_dependencies(repo)).encode(), compiled.build_key(repo).encode()]
    for path in compiled.node_sources(repo):
        parts += [str(path.relative_to(repo)).encode(), path.read_bytes()]
    return f"{NODE_REPO}:{_sha(parts)}"


def node_image(repo: Path = REPO) -> str:
    """The node image a run uses: $SPLITLAB_NODE_IMAGE if set (pin an image while editing), else `node_tag()`."""
    return os.environ.get("SPLITLAB_NODE_IMAGE") or node_tag(repo)


def image_exists(tag: str) -> bool:
    return run(["docker", "image", "inspect", tag], check=False).returncode == 0


def debian_mirror(apt_dir: Path = Path("/etc/apt")) -> str:
    """The host's Debian archive mirror from its apt sources (one-line or deb822), or $DEBIAN_MIRROR.

    Raises `EnvironmentProblem` when none is configured.
    """
    if os.environ.get("DEBIAN_MIRROR"):
        return os.environ["DEBIAN_MIRROR"]
    candidates: list[tuple[str, list[str]]] = []
    files = [apt_dir / "sources.list", *sorted((apt_dir / "sources.list.d").glob("*.list")),
             *sorted((apt_dir / "sources.list.d").glob("*.sources"))]
    for path in files:
        if not path.is_file():
            continue
        text = path.read_text(errors="replace")
        if path.suffix == ".sources":
            for stanza in text.split("\n\n"):
                fields: dict[str, str] = {}
                for line in stanza.splitlines():
                    if line.startswith("#") or ":" not in line or line.startswith(" "):
                        continue
                    key, _, value = line.partition(":")
                    fields[key.strip().lower()] = value.strip()
                if "deb" in fields.get("types", "").split() and fields.get("enabled", "yes") != "no":
                    for uri in fields.get("uris", "").split():
                        candidates.append((uri, fields.get("suites", "").split()))
        else:
            for line in text.splitlines():
                words = line.split("#", 1)[0].split()
                if len(words) >= 3 and words[0] == "deb":
                    words = [w for w in words if not w.startswith("[")]
                    candidates.append((words[1], words[2:3]))
    for uri, suites in candidates:
        if "security" in uri:
            continue
        if any("-" not in suite for suite in suites) and uri.rstrip("/").endswith("/debian"):
            return uri
    raise EnvironmentProblem("no Debian archive mirror found in the host's apt sources",
                             hint="set DEBIAN_MIRROR=<mirror URL>, or BASE_IMAGE=python:3.11-slim if you have a registry")


def build_base(log: Log, repo: Path = REPO) -> str:
    """Build the base image unless it exists; returns its tag. Needs root and mmdebstrap. A second caller in this
    process waits for the first's build instead of making its own."""
    tag = base_tag(repo)
    if "BASE_IMAGE" in os.environ:
        log(f"base image: {tag} (from BASE_IMAGE)")
        return tag
    with _BASE_BUILD:
        return _bootstrap_base(tag, repo, log)


def _bootstrap_base(tag: str, repo: Path, log: Log) -> str:
    if image_exists(tag):
        log(f"base image: {tag} (up to date)")
        return tag
    if os.geteuid() != 0:
        raise EnvironmentProblem("building the base image with mmdebstrap needs root",
                                 hint="run 'sudo make images', or set BASE_IMAGE=python:3.11-slim")
    mirror = debian_mirror()
    log(f"base image: building {tag} with mmdebstrap {SUITE} ({VARIANT}) ...")
    work = Path(tempfile.mkdtemp(prefix="splitlab-base-"))
    try:
        tarball = work / "base.tar"
        run(["mmdebstrap", f"--variant={VARIANT}", f"--include={','.join(base_packages(repo))}", "--quiet",
             f"--hook-dir={MERGED_USR_HOOKS}", *(f"--dpkgopt=path-exclude=/{path}/*" for path in TRIM_PATHS),
             SUITE, str(tarball), mirror], timeout_s=1800,
            hint="install mmdebstrap (apt-get install mmdebstrap; make images does) and check the mirror")
        run(["docker", "import", "--change", f"ENV PATH={DEFAULT_PATH}", "--change", 'CMD ["python3"]', str(tarball),
             tag], timeout_s=600)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    log(f"base image: built {tag}")
    return tag


def _install_wheels(deps: list[str], site: Path, repo: Path, log: Log) -> None:
    """`deps` unpacked into `site` from wheels (downloaded once per set of requirements, cached under .build/)."""
    if sys.version_info[:2] != (3, 11):
        raise EnvironmentProblem(f"the node image's wheels are built with the controller's Python, which is "
                                 f"{sys.version.split()[0]}; it must be 3.11 like the image's",
                                 hint="create the virtual environment with python3.11 (make clean; make test)")
    wheels = repo / ".build" / "wheels" / _sha([d.encode() for d in deps])
    if not wheels.is_dir() or not any(wheels.iterdir()):
        log(f"downloading wheels for {', '.join(deps)}")
        wheels.mkdir(parents=True, exist_ok=True)
        run([sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:", "--dest", str(wheels), *deps],
            timeout_s=600, hint="PyPI must be reachable to fetch the node's wheels")
    run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--find-links", str(wheels),
         "--only-binary=:all:", "--no-compile", "--target", str(site), *deps], timeout_s=600)


def _copy_package(repo: Path, name: str, ctx: Path) -> None:
    shutil.copytree(repo / name, ctx / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def _prepare_node_context(ctx: Path, repo: Path, log: Log) -> None:
    _install_wheels(node_dependencies(repo), ctx / "site", repo, log)
    _copy_package(repo, "node", ctx)
    shutil.copytree(compiled.build(log, repo), ctx / "compiled")  # what its nodes run (chaos.cluster.compiled)
    shutil.copy(repo / "images/node/Dockerfile", ctx / "Dockerfile")


def build_node(log: Log, repo: Path = REPO) -> str:
    """Build the node image unless an image for the current inputs exists; returns its tag."""
    tag = node_tag(repo)
    if image_exists(tag):
        log(f"node image: {tag} (up to date)")
        return tag
    base = base_tag(repo)
    if not os.environ.get("BASE_IMAGE") and not image_exists(base):
        raise EnvironmentProblem(f"base image {base} is missing", hint="run 'make images'")
    return _build_from_context("node image", tag, base, NODE_REPO, lambda ctx: _prepare_node_context(ctx, repo, log),
                               log)


def _build_from_context(what: str, tag: str, base: str, repo_name: str, prepare: Callable[[Path], None],
                        log: Log) -> str:
    """`docker build` of a context `prepare` fills in a temporary directory, on `base`, tagged `tag` and
    `<repo_name>:latest`; the directory is removed whatever happens. Returns `tag`."""
    ctx = Path(tempfile.mkdtemp(prefix=f"{repo_name}-ctx-"))
    try:
        prepare(ctx)
        log(f"{what}: building {tag} on {base}")
        run(["docker", "build", "--quiet", "--force-rm", "--build-arg", f"BASE_IMAGE={base}", "-t", tag,
             "-t", f"{repo_name}:latest", str(ctx)], timeout_s=900)
    finally:
        shutil.rmtree(ctx, ignore_errors=True)
    log(f"{what}: built {tag}")
    return tag


JAVA_SOURCES = "images/jgroups/java"
JGROUPS_JAR = "/usr/share/java/jgroups.jar"  # in the JGroups base image, from libjgroups-java


def _tree_parts(repo: Path, paths: list[Path]) -> list[bytes]:
    parts: list[bytes] = []
    for path in paths:
        parts += [str(path.relative_to(repo)).encode(), path.read_bytes()]
    return parts


def _sources(repo: Path, folder: str, suffix: str) -> list[Path]:
    return sorted(p for p in (repo / folder).rglob(f"*{suffix}") if "__pycache__" not in p.parts)


def jgroups_dependencies(repo: Path = REPO) -> list[str]:
    """The JGroups node's Python dependencies: the `node` and `jgroups` extras."""
    return node_dependencies(repo) + dependencies("jgroups", repo)


def jgroups_tag(repo: Path = REPO) -> str:
    """`splitlab-jgroups:<hash>` of its base, its Dockerfile, its Python dependencies, the node and JGroups-node
    sources it carries and the trace protocol's Java sources."""
    parts = [layer_tag(repo, JGROUPS_BASE_REPO, JGROUPS_BASE_DIR).encode(),
             (repo / "images/jgroups/Dockerfile").read_bytes(),
             "\n".join(jgroups_dependencies(repo)).encode()]
    parts += _tree_parts(repo, compiled.node_sources(repo) + _sources(repo, "jgnode", ".py")
                         + _sources(repo, JAVA_SOURCES, ".java"))
    return f"{JGROUPS_REPO}:{_sha(parts)}"


def _compile_trace(base: str, ctx: Path, repo: Path) -> None:
    """The trace protocol's jar (`ctx/splitlab-jgroups.jar`), compiled by the host's javac against the jar of the
    image it will run in (copied out of `base`). Raises EnvironmentProblem when javac is missing."""
    if shutil.which("javac") is None:
        raise EnvironmentProblem("javac is missing: the JGroups image compiles its trace protocol with it",
                                 hint="apt-get install default-jdk-headless (make images does)")
    build = ctx / "java-build"
    (build / "classes").mkdir(parents=True)
    created = run(["docker", "create", base]).stdout.strip()
    try:
        run(["docker", "cp", "-L", f"{created}:{JGROUPS_JAR}", str(build / "jgroups.jar")])
    finally:
        run(["docker", "rm", created], check=False)
    sources = [str(p) for p in _sources(repo, JAVA_SOURCES, ".java")]
    run(["javac", "--release", "17", "-nowarn", "-d", str(build / "classes"), "-cp", str(build / "jgroups.jar"),
         *sources], timeout_s=300)
    with zipfile.ZipFile(ctx / "splitlab-jgroups.jar", "w", zipfile.ZIP_DEFLATED) as jar:
        jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nCreated-By: splitlab\n\n")
        for cls in sorted((build / "classes").rglob("*.class")):
            jar.write(cls, str(cls.relative_to(build / "classes")))
    shutil.rmtree(build)


def build_jgroups(log: Log, repo: Path = REPO) -> str:
    """Build the JGroups node image (and its bases) unless an image for the current inputs exists; returns its
    tag. Needs root, mmdebstrap, javac, and the Debian mirror from containers (its base's packages)."""
    tag = jgroups_tag(repo)
    if image_exists(tag):
        log(f"JGroups node image: {tag} (up to date)")
        return tag
    base = build_layer(log, "JGroups base image", JGROUPS_BASE_REPO, JGROUPS_BASE_DIR, repo)

    def prepare(ctx: Path) -> None:
        _install_wheels(jgroups_dependencies(repo), ctx / "site", repo, log)
        _copy_package(repo, "node", ctx)
        _copy_package(repo, "jgnode", ctx)
        _compile_trace(base, ctx, repo)
        shutil.copy(repo / "images/jgroups/Dockerfile", ctx / "Dockerfile")
    return _build_from_context("JGroups node image", tag, base, JGROUPS_REPO, prepare, log)


def layer_tag(repo: Path, repo_name: str, folder: str) -> str:
    """`<repo_name>:<hash>` of the base tag and the files of `folder` (an image `build_layer` makes)."""
    parts = [base_tag(repo).encode()]
    for path in sorted((repo / folder).iterdir()):
        parts += [path.name.encode(), path.read_bytes()]
    return f"{repo_name}:{_sha(parts)}"


def build_layer(log: Log, what: str, repo_name: str, folder: str, repo: Path = REPO) -> str:
    """The image of `folder`'s Dockerfile on the base, built unless it exists (the builds install Debian
    packages: the Debian mirror must be reachable from containers); returns its tag."""
    tag = layer_tag(repo, repo_name, folder)
    if image_exists(tag):
        log(f"{what}: {tag} (up to date)")
        return tag
    base = build_base(log, repo)
    log(f"{what}: building {tag} on {base} (apt-get install ...)")
    run(["docker", "build", "--quiet", "--force-rm", "--build-arg", f"BASE_IMAGE={base}", "-t", tag,
         str(repo / folder)], timeout_s=1800,
        hint="the build installs Debian packages: the Debian mirror must be reachable from containers")
    log(f"{what}: built {tag}")
    return tag


def build_hostbed(log: Log, repo: Path = REPO) -> str:
    """Build the test-bed host image unless it exists; returns its tag."""
    return build_layer(log, "test-bed host image", HOSTBED_REPO, HOSTBED_DIR, repo)


def _agent_files(repo: Path) -> list[Path]:
    files: list[Path] = []
    for rel in AGENT_MODULES:
        path = repo / rel
        files += sorted(p for p in path.rglob("*.py") if "__pycache__" not in p.parts) if path.is_dir() else [path]
    return files


# The agent's Python packages, at the controller's releases: pure-Python wheels, unpacked by the image's build.
AGENT_PACKAGES = {"scapy": "--only-binary=:all:"}


def agent_package_versions() -> dict[str, str]:
    """The releases of `AGENT_PACKAGES` the controller runs: the agent image carries the same."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return {name: version(name) for name in AGENT_PACKAGES}
    except PackageNotFoundError as exc:
        raise EnvironmentProblem(f"{exc.name} is not installed in the controller's environment",
                                 hint="make test installs it") from None


def agent_tag(repo: Path = REPO) -> str:
    """`splitlab-agent:<hash>` of the node image, the agent's Dockerfile, its packages' releases and the
    shaper's sources."""
    parts = [node_image(repo).encode(), (repo / "images/agent/Dockerfile").read_bytes(),
             json.dumps(agent_package_versions(), sort_keys=True).encode()]
    for path in _agent_files(repo):
        parts += [str(path.relative_to(repo)).encode(), path.read_bytes()]
    return f"{AGENT_REPO}:{_sha(parts)}"


def _agent_dists(repo: Path, log: Log) -> Path:
    """A directory with the agent's package files (fetched by the controller's pip, which knows the way to
    PyPI, once per set of releases: cached under .build/)."""
    versions = agent_package_versions()
    dists = repo / ".build" / "agent-dists" / _sha([json.dumps(versions, sort_keys=True).encode()])
    if not (dists / "complete").exists():
        log(f"shaper agent image: downloading {', '.join(f'{n} {v}' for n, v in versions.items())}")
        dists.mkdir(parents=True, exist_ok=True)
        for name, how in AGENT_PACKAGES.items():
            run([sys.executable, "-m", "pip", "download", "--quiet", how, "--no-deps", "--dest", str(dists),
                 f"{name}=={versions[name]}"], timeout_s=600, hint=f"PyPI must be reachable to fetch {name}")
        (dists / "complete").touch()
    return dists


def build_agent(log: Log, repo: Path = REPO) -> str:
    """Build the shaper agent image unless it exists; returns its tag. Needs the node image. Its packages are
    fetched here (`_agent_dists`); its build installs a Debian package: the Debian mirror must be reachable from
    containers."""
    tag = agent_tag(repo)
    if image_exists(tag):
        log(f"shaper agent image: {tag} (up to date)")
        return tag
    node = node_image(repo)
    if not image_exists(node):
        raise EnvironmentProblem(f"node image {node} is missing", hint="run 'make images'")
    dists = _agent_dists(repo, log)
    ctx = Path(tempfile.mkdtemp(prefix="splitlab-agent-ctx-"))
    try:
        shutil.copy(repo / "images/agent/Dockerfile", ctx / "Dockerfile")
        shutil.copytree(dists, ctx / "dists", ignore=shutil.ignore_patterns("complete"))
        for path in _agent_files(repo):
            (ctx / path.relative_to(repo)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, ctx / path.relative_to(repo))
        log(f"shaper agent image: building {tag} on {node}")
        run(["docker", "build", "--quiet", "--force-rm", "--build-arg", f"NODE_IMAGE={node}", "-t", tag, str(ctx)],
            timeout_s=1800, hint="the build installs a Debian package: the Debian mirror must be reachable from "
                                 "containers")
    finally:
        shutil.rmtree(ctx, ignore_errors=True)
    log(f"shaper agent image: built {tag}")
    return tag


def build_all(log: Log, repo: Path = REPO) -> str:
    """Build what is missing of the node image and its base; returns the node image tag. When the node image is
    missing, the node's compiled build (mypyc and the C compiler: CPU) runs while mmdebstrap makes the base
    (mostly downloads, unpacking and `docker import`), not after it: on a fresh machine `splitlab images --kind all`
    took 88 s instead of 105 s (`make test`'s setup)."""
    if image_exists(node_tag(repo)):
        return build_node(log, repo)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="compile") as pool:
        site = pool.submit(compiled.build, log, repo)
        build_base(log, repo)
        site.result()
    return build_node(log, repo)


@dataclass(frozen=True)
class ImageStatus:
    tag: str
    present: bool


def status(repo: Path = REPO) -> list[ImageStatus]:
    """Whether the images for the current inputs exist (for `doctor`)."""
    tags = [base_tag(repo), node_tag(repo)]
    return [ImageStatus(t, image_exists(t)) for t in tags]
