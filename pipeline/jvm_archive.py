"""The JVM options of a short-lived analysis: C1 only, serial GC, and a class-data-sharing archive of Spark's classes
(which every other driver JVM maps too).

A cold `splitlab analyze` of a small history is mostly a JVM warming up: loading and verifying some 20,000
classes of Spark's jars, and compiling hot code with C2 on the same two cores the analysis needs. Such a JVM
runs with `-XX:TieredStopAtLevel=1 -XX:+UseSerialGC` (C1's code is plenty for seconds of work) and maps a
class-data-sharing archive (JDK 17's dynamic CDS: `-XX:SharedArchiveFile`) of the classes an analysis loads.

The archive is made by the first short-lived analysis on the machine: its JVM records the classes it loaded
(`-XX:ArchiveClassesAtExit`) into a file of its own; when the analysing process exits, it lets its JVM exit,
waits for it (up to `RECORD_TIMEOUT_S`) and moves the file into place, so no other JVM ever maps a half-written
archive. One process records at a time: its recording file, made when it starts, tells the others (which run
without an archive meanwhile); a recording whose process is gone is removed once untouched for
`RECORD_TIMEOUT_S`, whether or not an archive exists by then (an xdist worker exits without its atexit
handlers, and its JVM, left alone, writes its recording when its stdin closes: `make test` left two of 130-150 MB
behind, 2026-12-02). Every other driver JVM (the warm service's, a large history's) maps the archive too once there
is one, keeping C2 and the default collector (`mapped_options`). The archive's name holds a digest of the Java runtime
and of pyspark's jars (another Java or pyspark gets an archive of its own) and its size (a JVM crashes on a
truncated archive; one of another size is removed). The JVM's own log goes to stderr at error level only: it
would otherwise print CDS warnings (classes it cannot archive, an archive it cannot use) on the analysis's
stdout. Removing the cache directory is always safe.
"""
from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from node.usercache import user_cache

CACHE_ENV = "SPLITLAB_JVM_CACHE"
# how long an analysing process waits at its exit for its JVM to write the archive: a few seconds alone, but over
# 60 s in a worker at nice 10 beside make test's clusters (CI, 2026-11-30); only the first analysis on a machine
RECORD_TIMEOUT_S = 300.0
# the JVM's own log to stderr at error level only (it would print CDS warnings on the analysis's stdout)
QUIET_OPTIONS = ("-Xlog:disable", "-Xlog:all=error:stderr")
SHORT_LIVED_OPTIONS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", *QUIET_OPTIONS)


def cache_dir() -> Path:
    """`$SPLITLAB_JVM_CACHE`, else the user's cache (`node.usercache`: `~/.cache/splitlab/jvm`)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    return user_cache("jvm")


def _runtime_digest() -> str:
    """A digest of what the archive depends on: the java binary Spark's launcher runs (`$JAVA_HOME/bin/java`,
    else the one on PATH) and pyspark's jars, by path (a JVM maps an archive only for the class path it was
    recorded with: another virtualenv's pyspark gets an archive of its own)."""
    import pyspark

    java_home = os.environ.get("JAVA_HOME")
    java = shutil.which("java", path=str(Path(java_home, "bin")) if java_home else None)
    parts = []
    if java is not None:
        real = Path(java).resolve()
        parts += [str(real), str(real.stat().st_mtime_ns)]
    parts += sorted(str(p) for p in (Path(pyspark.__file__).resolve().parent / "jars").glob("*.jar"))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _archive(digest: str, where: Path | None = None) -> Path | None:
    """This runtime's archive if there is a whole one in `where` (default: `cache_dir()`): its name holds its size
    (`spark-<digest>.<bytes>.jsa`), as a JVM crashes on a truncated archive; one of another size is removed."""
    for path in (where or cache_dir()).glob(f"spark-{digest}.*.jsa"):
        size = path.name.split(".")[1]
        try:
            if size.isdigit() and path.stat().st_size == int(size):
                return path
            path.unlink()
        except OSError:
            continue
    return None


def mapped_options() -> list[str]:
    """The driver JVM options of any other JVM (the warm service's, a large history's): map this runtime's archive
    when there is a whole one, else nothing; such a JVM never records one (it keeps C2 and the default collector,
    which a dynamic archive does not depend on). The service starts 2 s sooner with it, and its first analysis of
    15k events takes 1 s less (DESIGN.md)."""
    _sweep_recordings()
    found = archive()
    return [] if found is None else [*QUIET_OPTIONS, f"-XX:SharedArchiveFile={found}"]


def java_options() -> list[str]:
    """The driver JVM options of a short-lived analysis. Maps the archive when there is one; otherwise records
    one and arranges (at this process's exit) to wait for the JVM and move the archive into place."""
    digest = _runtime_digest()
    _sweep_recordings()
    archive = _archive(digest)
    if archive is not None:
        return [*SHORT_LIVED_OPTIONS, f"-XX:SharedArchiveFile={archive}"]
    if _recorded_elsewhere(digest):
        return list(SHORT_LIVED_OPTIONS)
    recording = _own_recording(digest)
    try:
        cache_dir().mkdir(parents=True, exist_ok=True)
        recording.touch()  # tells other processes that this one records (the JVM writes it at its exit)
    except OSError:
        return list(SHORT_LIVED_OPTIONS)  # no writable cache: run without an archive
    atexit.register(_keep_recording, recording)
    return [*SHORT_LIVED_OPTIONS, f"-XX:ArchiveClassesAtExit={recording}"]


def archive() -> Path | None:
    """This runtime's whole archive, if there is one."""
    return _archive(_runtime_digest())


def keep_now() -> Path | None:
    """What this process's exit would do, now: end its JVM (its Spark session must be stopped), keep what the JVM
    recorded, and return this runtime's archive (None when this process recorded none and none exists)."""
    recording = _own_recording(_runtime_digest())
    if recording.exists():
        atexit.unregister(_keep_recording)
        _keep_recording(recording)
    return archive()


def _own_recording(digest: str) -> Path:
    """Where this process's JVM records (`spark-<digest>.<pid>.recording`)."""
    return cache_dir() / f"spark-{digest}.{os.getpid()}.recording"


def _recorder_runs(recording: Path) -> bool | None:
    """Whether the process named in `recording`'s name still runs (None: the name holds no process id)."""
    pid = recording.name.split(".")[1]
    return Path(f"/proc/{pid}").exists() if pid.isdigit() else None


def _recorded_elsewhere(digest: str) -> bool:
    """Another living process records this runtime's archive."""
    own = _own_recording(digest)
    return any(path != own and _recorder_runs(path) for path in cache_dir().glob(f"spark-{digest}.*.recording"))


def _sweep_recordings() -> None:
    """Remove what killed processes left: a recording whose process is gone, untouched for `RECORD_TIMEOUT_S`
    (its JVM, left alone, wrote it when its stdin closed and nobody moved it into place). A cache directory that
    does not exist holds none."""
    for path in cache_dir().glob("*.recording"):
        try:
            if _recorder_runs(path) is False and time.time() - path.stat().st_mtime > RECORD_TIMEOUT_S:
                path.unlink()
        except OSError:
            continue


def _keep_recording(recording: Path) -> None:
    """At exit: let this process's JVM end and keep what it recorded (`finish`)."""
    from pyspark import SparkContext

    proc = getattr(SparkContext._gateway, "proc", None)
    finish(recording, proc if isinstance(proc, subprocess.Popen) else None)


def finish(recording: Path, jvm: subprocess.Popen | None) -> None:
    """End `jvm` (it leaves when its stdin closes), wait for it to write `recording`, and make that the archive
    if the JVM exited cleanly and there is none yet; a recording with no JVM, of a failed JVM or a late one is
    removed."""
    clean = False
    if jvm is not None and jvm.stdin is not None:
        try:
            jvm.stdin.close()
            clean = jvm.wait(timeout=RECORD_TIMEOUT_S) == 0
        except (OSError, subprocess.TimeoutExpired) as exc:
            print(f"splitlab: the JVM's class archive was not kept: {exc}", file=sys.stderr)
    digest = recording.name.split(".")[0].removeprefix("spark-")
    try:
        if clean and recording.is_file() and recording.stat().st_size and _archive(digest, recording.parent) is None:
            os.replace(recording, recording.with_name(
                f"{recording.name.split('.')[0]}.{recording.stat().st_size}.jsa"))
        else:  # not whole, or another process's archive came first
            recording.unlink(missing_ok=True)
    except OSError as exc:
        print(f"splitlab: the JVM's class archive was not kept: {exc}", file=sys.stderr)
