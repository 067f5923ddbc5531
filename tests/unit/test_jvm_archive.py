"""The short-lived analysis JVM's class archive: recorded by the first JVM, kept only when whole, then mapped.

The recording test starts real JVMs in new processes (the archive is written when a JVM exits); the others
only look at the cache directory.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline import jvm_archive

ROOT = Path(__file__).resolve().parents[2]
# prints the driver's JVM options, a job's result, the files of the cache directory (argv[2]) its JVM maps, and how
# its expressions are evaluated (`session.SHORT_LIVED_CONF`)
# (spark-submit's process becomes the JVM: its /proc maps)
_START = """
import sys
from pyspark import SparkContext
from pipeline.session import spark_session
spark = spark_session("local[1]", short_lived=sys.argv[1] == "short")
print(spark.sparkContext.getConf().get("spark.driver.extraJavaOptions"))
print(spark.range(5).selectExpr("sum(id)").collect()[0][0])
maps = open(f"/proc/{SparkContext._gateway.proc.pid}/maps").read().split()
print(sorted({word for word in maps if word.startswith(sys.argv[2])}))
print(spark.conf.get("spark.sql.codegen.factoryMode"))
"""


def _start(cache: Path, short_lived: bool = True) -> tuple[list[str], str]:
    """The lines the JVM's process printed (`_START`), and its stderr (why an archive was not kept)."""
    env = {**os.environ, jvm_archive.CACHE_ENV: str(cache), "PYTHONPATH": str(ROOT)}
    env.pop("SPLITLAB_SPARK_MASTER", None)
    done = subprocess.run([sys.executable, "-c", _START, "short" if short_lived else "long", str(cache)], env=env,
                          capture_output=True, text=True, timeout=jvm_archive.RECORD_TIMEOUT_S + 120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.splitlines(), done.stderr


def test_the_first_short_lived_jvm_records_the_archive_and_the_next_maps_it(tmp_path: Path, monkeypatch) -> None:
    """... and a long-lived JVM (the warm service's) maps it too, keeping C2 and its collector; none records. (The
    options of a long-lived JVM before there is an archive, nothing to map and nothing recorded, are read without
    starting one: the last JVM here shows that a long-lived session takes those options.)"""
    monkeypatch.setenv(jvm_archive.CACHE_ENV, str(tmp_path))
    assert jvm_archive.mapped_options() == [] and not list(tmp_path.iterdir())
    first, first_err = _start(tmp_path)
    assert "-XX:ArchiveClassesAtExit=" in first[0] and "-XX:TieredStopAtLevel=1" in first[0]
    assert "SharedArchiveFile" not in first[0]
    assert first[1] == "10" and first[2] == "[]" and first[3] == "NO_CODEGEN"
    archives = list(tmp_path.glob("spark-*.jsa"))
    assert len(archives) == 1, (list(tmp_path.iterdir()), first_err[-2000:])
    assert archives[0].stat().st_size == int(archives[0].name.split(".")[1]) > 1 << 20
    assert not list(tmp_path.glob("*.recording"))

    second, _ = _start(tmp_path)
    assert f"-XX:SharedArchiveFile={archives[0]}" in second[0]
    assert second[1] == "10" and second[2] == str([str(archives[0])]), "the JVM did not map the archive"
    long_lived, _ = _start(tmp_path, short_lived=False)
    assert f"-XX:SharedArchiveFile={archives[0]}" in long_lived[0]
    assert "TieredStopAtLevel" not in long_lived[0] and "ArchiveClassesAtExit" not in long_lived[0]
    assert long_lived[1] == "10" and long_lived[2] == str([str(archives[0])]), "the JVM did not map the archive"
    assert long_lived[3] == "FALLBACK"  # Spark's default: generated code, interpreted where it does not compile
    assert list(tmp_path.glob("spark-*.jsa")) == archives


def test_an_archive_of_another_size_than_its_name_says_and_orphan_recordings_are_removed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(jvm_archive.CACHE_ENV, str(tmp_path))
    kept: list[tuple] = []
    monkeypatch.setattr(jvm_archive.atexit, "register", lambda *args: kept.append(args))
    digest = jvm_archive._runtime_digest()
    truncated = tmp_path / f"spark-{digest}.4096.jsa"
    truncated.write_bytes(b"x" * 100)
    options = jvm_archive.java_options()
    assert not truncated.exists()
    assert not any(o.startswith("-XX:SharedArchiveFile") for o in options)
    assert [o for o in options if o.startswith("-XX:ArchiveClassesAtExit=")] == [
        f"-XX:ArchiveClassesAtExit={tmp_path}/spark-{digest}.{os.getpid()}.recording"]
    assert kept and kept[0][0] is jvm_archive._keep_recording

    orphan, fresh = tmp_path / f"spark-{digest}.999999999.recording", tmp_path / f"spark-{digest}.999999998.recording"
    orphan.write_bytes(b"left by a killed process")
    fresh.write_bytes(b"its JVM may still be writing it")
    old_s = time.time() - jvm_archive.RECORD_TIMEOUT_S - 10
    os.utime(orphan, (old_s, old_s))
    jvm_archive.java_options()
    assert not orphan.exists() and fresh.exists()

    whole = tmp_path / f"spark-{digest}.100.jsa"
    whole.write_bytes(b"x" * 100)
    assert f"-XX:SharedArchiveFile={whole}" in jvm_archive.java_options()


def test_a_recording_without_a_jvm_that_ended_cleanly_is_removed(tmp_path: Path) -> None:
    recording = tmp_path / "spark-0123.999.recording"
    recording.write_bytes(b"half")
    jvm_archive.finish(recording, None)  # no JVM to wait for: not known to be whole
    assert list(tmp_path.iterdir()) == []
    failed = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read(); sys.exit(3)"],
                              stdin=subprocess.PIPE)
    recording.write_bytes(b"half")
    jvm_archive.finish(recording, failed)
    assert failed.returncode == 3
    assert list(tmp_path.iterdir()) == []
    clean = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    recording.write_bytes(b"whole")
    jvm_archive.finish(recording, clean)
    assert [p.name for p in tmp_path.iterdir()] == ["spark-0123.5.jsa"]
    late = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    recording.write_bytes(b"second")
    jvm_archive.finish(recording, late)  # another process's archive came first: one archive, no second
    assert [p.name for p in tmp_path.iterdir()] == ["spark-0123.5.jsa"]


def test_one_process_records_at_a_time_and_what_a_gone_one_left_goes_beside_an_archive(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(jvm_archive.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(jvm_archive.atexit, "register", lambda *args: None)
    digest = jvm_archive._runtime_digest()
    recorder = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    claim = tmp_path / f"spark-{digest}.{recorder.pid}.recording"
    claim.touch()
    try:
        options = jvm_archive.java_options()
    finally:
        assert recorder.stdin is not None
        recorder.stdin.close()
        recorder.wait()
    assert options == list(jvm_archive.SHORT_LIVED_OPTIONS)  # no archive to map, none recorded here
    assert list(tmp_path.iterdir()) == [claim]

    whole = tmp_path / f"spark-{digest}.100.jsa"
    whole.write_bytes(b"x" * 100)
    old_s = time.time() - jvm_archive.RECORD_TIMEOUT_S - 10
    os.utime(claim, (old_s, old_s))  # its process gone, the file untouched since: an xdist worker's leftover
    assert jvm_archive.mapped_options()[-1] == f"-XX:SharedArchiveFile={whole}"
    assert list(tmp_path.iterdir()) == [whole]
