"""The analysis session's JVM-side settings that only show as time: generated classes kept, gateway names pinned
and their functions looked up once, no stage fused into a method too large for the JIT; the JVM's stdout, and a
stop that does not wait for PySpark's accumulator server."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from py4j.java_gateway import JVMView
from py4j.protocol import REFL_GET_MEMBER_SUB_COMMAND_NAME, REFLECTION_COMMAND_NAME
from pyspark.sql import functions as F

from pipeline import session
from pipeline.session import CODEGEN_CACHE_ENTRIES, HUGE_METHOD_BYTES
from pipeline_fixtures import shared_spark


def test_function_calls_do_not_ask_the_gateway_to_resolve_a_name(monkeypatch: pytest.MonkeyPatch) -> None:
    spark = shared_spark()
    asked: list[str] = []
    resolve = JVMView.__getattr__

    def counting(view: JVMView, name: str):
        asked.append(name)
        return resolve(view, name)

    monkeypatch.setattr(JVMView, "__getattr__", counting)
    condition = (F.col("a") == F.lit(1)) & F.col("b").isin("x", "y")
    rows = spark.createDataFrame([(1, "x"), (2, "x"), (1, "z")], "a int, b string").filter(condition).collect()
    assert [tuple(r) for r in rows] == [(1, "x")]
    assert "functions" not in asked and "PythonUtils" not in asked, asked


def test_a_function_is_looked_up_in_the_jvm_once_not_before_every_call(monkeypatch: pytest.MonkeyPatch) -> None:
    spark = shared_spark()
    client = spark.sparkContext._gateway._gateway_client
    sent: list[str] = []
    send = client.send_command

    def counting(command: str, *args, **kwargs):
        sent.append(command)
        return send(command, *args, **kwargs)

    monkeypatch.setattr(client, "send_command", counting)
    F.col("a"), F.lit(1), F.upper("b")  # looked up here if no earlier test did
    sent.clear()
    condition = (F.col("a") == F.lit(1)) & (F.upper("b") == "X")
    lookups = [c for c in sent if c.startswith(REFLECTION_COMMAND_NAME + REFL_GET_MEMBER_SUB_COMMAND_NAME)]
    assert lookups == [] and len(sent) >= 3, sent
    rows = spark.createDataFrame([(1, "x"), (2, "x"), (1, "z")], "a int, b string").filter(condition).collect()
    assert [tuple(r) for r in rows] == [(1, "x")]


def test_the_jvm_keeps_more_generated_classes_than_an_analysis_compiles() -> None:
    spark = shared_spark()
    assert int(spark.conf.get("spark.sql.codegen.cache.maxEntries")) == CODEGEN_CACHE_ENTRIES >= 1000


HOTSPOT_HUGE_METHOD_BYTES = 8000  # HotSpot's -XX:HugeMethodLimit: a larger method is never JIT-compiled


def test_no_stage_is_fused_into_a_method_the_jit_will_not_compile() -> None:
    spark = shared_spark()
    assert int(spark.conf.get("spark.sql.codegen.hugeMethodLimit")) == HUGE_METHOD_BYTES <= HOTSPOT_HUGE_METHOD_BYTES


def test_the_test_sessions_jvm_is_a_short_lived_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite's shared session (and the pytest plugin's, `splitlab_spark`, which the same worker may start
    first) runs C1 only with the serial collector, its expressions interpreted: a test session's many small
    analyses cost 30 % and then 20 % less JVM CPU that way, and `make test` is bound by its two cores. What
    `shared_spark` asks for is checked on its own too, since the running session may be the plugin's."""
    options = shared_spark().sparkContext.getConf().get("spark.driver.extraJavaOptions")
    assert "-XX:TieredStopAtLevel=1" in options and "-XX:+UseSerialGC" in options, options
    assert shared_spark().conf.get("spark.sql.codegen.factoryMode") == "NO_CODEGEN"  # interpreted, not compiled
    asked: list[dict] = []
    monkeypatch.setattr(session, "spark_session",
                        lambda *args, **kwargs: asked.append(kwargs) or SimpleNamespace(stop=lambda: None))
    shared_spark.__wrapped__()  # past functools.cache: what a first call asks for
    assert [kwargs.get("short_lived") for kwargs in asked] == [True]


def _in_new_process(code: str, err_path: Path) -> str:
    """The stdout of `code` run by a new Python (a Spark session of its own), its stderr in `err_path`; asserts
    that it exited 0."""
    with open(err_path, "w") as err:
        done = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=err, text=True,
                              timeout=120, env={**os.environ, "SPLITLAB_SPARK_MASTER": ""})
    assert done.returncode == 0, err_path.read_text()[-2000:]
    return done.stdout


def test_the_jvm_writes_its_stdout_to_our_stderr_so_a_reader_of_our_stdout_is_not_kept_waiting(tmp_path) -> None:
    """The driver's JVM outlives the Python process that started it by its shutdown (0.4 s): started with our stdout,
    it kept a pipe reading `splitlab analyze`'s output open until then. Its descriptor 1 is our descriptor 2."""
    code = ("import os; from pipeline.session import spark_session; spark = spark_session('local[1]'); "
            "pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid(); "
            "print(os.readlink(f'/proc/{pid}/fd/1'), os.readlink(f'/proc/{pid}/fd/2'), os.readlink('/proc/self/fd/2'))")
    jvm_out, jvm_err, ours = _in_new_process(code, tmp_path / "err").split()
    assert jvm_out == jvm_err == ours == str(tmp_path / "err")


STOP_CODE = """
import threading
from pyspark.sql import SparkSession
from pipeline.session import spark_session, stop_session
spark = spark_session("local[1]")
server = spark.sparkContext._accumulatorServer
release, shut = threading.Event(), threading.Event()
real_shutdown = server.shutdown
def held():
    release.wait()
    real_shutdown()
    shut.set()
server.shutdown = held
stop_session(spark)  # returns while the accumulator server's shutdown is held
print("stopped", spark.sparkContext._jsc is None, SparkSession.getActiveSession() is None, not shut.is_set())
release.set()
print("server shut", shut.wait(30))
print("again", spark_session("local[1]").range(3).count())
"""


def test_a_stop_does_not_wait_for_the_accumulator_servers_loop(tmp_path) -> None:
    """`stop_session` stops the context and leaves the accumulator server's shutdown (PySpark's stop waits up to
    0.5 s for its loop) to a thread: with that shutdown held, the stop still returns, and the server is shut down
    once it is released; a new session starts after."""
    out = _in_new_process(STOP_CODE, tmp_path / "err")
    assert out.split("\n")[:3] == ["stopped True True True", "server shut True", "again 3"], out
