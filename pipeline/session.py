"""The Spark session for the analysis: `local[*]` unless a master is given, quiet, light to start.

The master comes from the `master` argument, else `SPLITLAB_SPARK_MASTER`, else `local[*]`. Logging goes to
stderr at WARN (chatty start-up loggers at ERROR) through a log4j2 file written at start; no UI, no progress
bars, few shuffle partitions (histories are small), no adaptive execution (its re-planning costs more than
it saves on these many small jobs). A session already running in this process is reused. The driver's JVM writes
its stdout to our stderr (`_start_jvm`); `stop_session` stops a session without PySpark's wait for its accumulator
server.

On a cluster master (`spark://...`, e.g. `splitlab spark-cluster up`, pipeline.standalone) the executors run
in other processes: their Python workers (a DataFrame made from driver-side rows runs one) are this
interpreter (`PYSPARK_PYTHON`, unless set), so they import what the driver imports, and a master on a loopback
address gets a driver bound to 127.0.0.1 as well (Spark would advertise the machine's first non-loopback
address to the executors). The history files are read by the executors: a cluster on another machine needs
them at the same path there.
"""
from __future__ import annotations

import os
import sys
import tempfile
import threading
from pathlib import Path
from urllib.parse import urlsplit

from py4j.java_gateway import JavaClass, JavaMember
from py4j.protocol import Py4JError
from pyspark import SparkConf, SparkContext
from pyspark.errors import PySparkException
from pyspark.java_gateway import launch_gateway
from pyspark.sql import SparkSession

from node.errors import EnvironmentProblem, UsageError
from pipeline import jvm_archive
from pipeline.master import MASTER_ENV, resolve_master

DRIVER_MEMORY_ENV = "SPLITLAB_SPARK_DRIVER_MEMORY"
DEFAULT_DRIVER_MEMORY = "2g"
SHUFFLE_PARTITIONS = 4
BYTES_PER_PARTITION = 64 << 20
APP_NAME = "splitlab-analyze"
# generated classes kept per JVM: Spark's default (100) is fewer than one analysis compiles, so a warm service
# compiled most of every analysis again (a quarter of its time)
CODEGEN_CACHE_ENTRIES = 4096
# bytecode size of a generated method beyond which a stage is not fused by whole-stage codegen: HotSpot never
# JIT-compiles a method over 8000 bytes (`-XX:HugeMethodLimit`), and Spark's default (65535) let the reader's
# one stage (parse, sixty validation rules, field count) run interpreted: 1M events read in 12.7 s, 6.3 s at 8000
HUGE_METHOD_BYTES = 8000
# a short-lived JVM's Spark settings beside its JVM options (`pipeline.jvm_archive`): expressions outside whole-stage
# codegen (projections, predicates, orderings) evaluated by Spark's interpreter, the path it falls back to when
# generated code does not compile, instead of generating and compiling a class for each (an internal setting since
# Spark 2.4: `spark.sql.codegen.factoryMode`). Such a JVM analyses small histories whose queries are new to it: the
# pipeline's check tests in one session 47 -> 37 s, its JVM's CPU 53-57 -> 43-46 s (four runs each); a cold
# analysis of 15k events 10.5 -> 9.9 s; a warm service's analysis (generated code cached, C2) within the noise, so
# it keeps Spark's default (2026-12-02)
SHORT_LIVED_CONF = {"spark.sql.codegen.factoryMode": "NO_CODEGEN"}
STDERR_FD = 2  # the descriptor, not sys.stderr (which a test's capture replaces with an object without one)
PINNED_CLASSES = ("org.apache.spark.sql.functions", "org.apache.spark.api.python.PythonUtils")

_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.console.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = spark %p %c{1}: %m%n
logger.utils.name = org.apache.spark.util.Utils
logger.utils.level = error
logger.native.name = org.apache.hadoop.util.NativeCodeLoader
logger.native.level = error
logger.shutdown.name = org.apache.spark.util.ShutdownHookManager
logger.shutdown.level = error
logger.blockmgr.name = org.apache.spark.storage.BlockManager
logger.blockmgr.level = error
logger.netty.name = org.apache.spark.network
logger.netty.level = error
"""


def _on_loopback(master: str) -> bool:
    """`master` runs in this process (`local...`) or is a cluster master on a loopback address."""
    if master.startswith("local"):
        return True
    host = urlsplit(master.split(",")[0]).hostname or ""
    return host == "localhost" or host.startswith("127.") or host == "::1"


def _log_config() -> Path:
    path = Path(tempfile.gettempdir()) / f"splitlab-log4j2-{os.getuid()}.properties"
    if not path.exists() or path.read_text() != _LOG4J2:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(_LOG4J2)
        tmp.replace(path)
    return path


def small_history(history_bytes: int) -> bool:
    """A history that fits one partition (`BYTES_PER_PARTITION`): read as one partition, its frames kept as local
    checkpoints (`pipeline.kept`), analysed cold in a JVM tuned for seconds of work (`pipeline.jvm_archive`)."""
    return history_bytes <= BYTES_PER_PARTITION


def partitions_for(history_bytes: int, most: int = SHUFFLE_PARTITIONS) -> int:
    """Shuffle partitions for a history of `history_bytes`: one per `BYTES_PER_PARTITION`, between 1 and `most`.

    A history of a few megabytes is all overhead in Spark: every partition more is a task more in every stage
    of every check (about a fifth of a warm analysis of 15k events went to that).
    """
    return max(1, min(most, -(-history_bytes // BYTES_PER_PARTITION)))


def analysis_session(spark: SparkSession, history_bytes: int) -> SparkSession:
    """A session of `spark`'s context for one analysis (its own SQL settings, the context's cache and
    executors), with the shuffle partitions `partitions_for(history_bytes)` within the context's setting."""
    most = int(spark.conf.get("spark.sql.shuffle.partitions") or SHUFFLE_PARTITIONS)
    session = spark.newSession()
    session.conf.set("spark.sql.shuffle.partitions", str(partitions_for(history_bytes, most)))
    return session


def spark_session(master: str | None = None, shuffle_partitions: int = SHUFFLE_PARTITIONS, *,
                  short_lived: bool = False) -> SparkSession:
    """Return the running session, or start one on `resolve_master(master)`; `short_lived`: a JVM started here
    is tuned for seconds of work on small histories (`pipeline.jvm_archive`, `SHORT_LIVED_CONF`); any other maps
    the class archive when there is one.

    Raises `UsageError` if a master was asked for explicitly and a session on another master already runs in
    this process, `EnvironmentProblem` if Spark cannot start (no Java, for instance).
    """
    wanted = master or os.environ.get(MASTER_ENV)
    active = SparkSession.getActiveSession()
    if active is not None:
        running = active.sparkContext.master
        if wanted and wanted != running:
            raise UsageError(f"a Spark session on {running} already runs in this process; cannot switch to {wanted}",
                             hint="analyze in a new process, or stop the running session first")
        return active
    resolved = resolve_master(master)
    java_options = [f"-Dlog4j2.configurationFile={_log_config()}",
                    *(jvm_archive.java_options() if short_lived else jvm_archive.mapped_options())]
    options = {"spark.app.name": APP_NAME, "spark.master": resolved,
               "spark.ui.enabled": "false",
               "spark.ui.showConsoleProgress": "false",
               "spark.sql.shuffle.partitions": str(shuffle_partitions),
               "spark.sql.session.timeZone": "UTC",
               "spark.sql.adaptive.enabled": "false",
               "spark.sql.debug.maxToStringFields": "200",
               "spark.sql.codegen.cache.maxEntries": str(CODEGEN_CACHE_ENTRIES),
               "spark.sql.codegen.hugeMethodLimit": str(HUGE_METHOD_BYTES),
               "spark.driver.extraJavaOptions": " ".join(java_options)}
    if short_lived:
        options.update(SHORT_LIVED_CONF)
    if _on_loopback(resolved):
        options.update({"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"})
    if resolved.startswith("local"):
        options["spark.driver.memory"] = os.environ.get(DRIVER_MEMORY_ENV, DEFAULT_DRIVER_MEMORY)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # read once, when the context starts
    try:
        _start_jvm(options)
        builder = SparkSession.builder
        for key, value in options.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
    except (PySparkException, Py4JError, OSError) as exc:
        raise EnvironmentProblem(f"cannot start Spark on {resolved}: {str(exc).strip().splitlines()[0]}",
                                 hint="Java 17 must be on PATH (or JAVA_HOME set); check the master URL") from exc
    spark.sparkContext.setLogLevel("WARN")
    _pin_gateway_classes(spark)
    return spark


def _start_jvm(options: dict[str, str]) -> None:
    """Start the driver's JVM with `options` unless this process has one (PySpark keeps it for the process, after
    its context stopped too), its stdout our stderr: it writes nothing there (its log goes to stderr), but a JVM
    holding our stdout kept whoever reads `splitlab analyze`'s output (a pipe, a test, the benchmark) waiting until
    the JVM had exited, 0.4 s after this process. PySpark's builder would start it with our stdout."""
    if SparkContext._gateway is not None:
        return
    conf = SparkConf().setAll(list(options.items()))
    SparkContext(conf=conf, gateway=launch_gateway(conf, popen_kwargs={"stdout": STDERR_FD}))


def stop_session(spark: SparkSession) -> None:
    """Stop `spark`'s context without waiting for PySpark's accumulator server: `SparkContext.stop` shuts that server
    down and waits until its loop sees the request, which it looks for every 0.5 s (0.3-0.5 s of each stop, against
    35 ms for the JVM's side of it, 2026-12-04; a cold `splitlab analyze` waited that long after its report). The
    server is shut down in a thread of its own instead (a daemon: a process that ends meanwhile ends it)."""
    context = spark.sparkContext
    server = getattr(context, "_accumulatorServer", None)
    context._accumulatorServer = None  # (what `stop` would shut down and wait for)
    try:
        spark.stop()
    finally:
        if server is not None:
            threading.Thread(target=server.shutdown, name="accumulator-server-stop", daemon=True).start()


def _pin_gateway_classes(spark: SparkSession) -> None:
    """Resolve once the JVM classes PySpark looks up by short name on every call (`F.col` and every other
    function asks the gateway for `functions`, each Column operator for `PythonUtils`).

    Py4J resolves a short name on each use by trying the gateway's wildcard imports in order, and each miss
    is a class-path scan of every jar: `functions` is the sixth import, so each `F.*` call paid five failed
    class loads (about a thousand calls per analysis). An attribute set on the gateway's view is found before
    Py4J's lookup runs. The pinned classes also keep their static methods (`StaticMethods`).
    """
    context = spark.sparkContext
    if context._jvm is None or context._gateway is None:
        return
    for qualified in PINNED_CLASSES:
        name = qualified.rsplit(".", 1)[1]
        if name not in vars(context._jvm):
            setattr(context._jvm, name, StaticMethods(qualified, context._gateway._gateway_client))


class StaticMethods(JavaClass):
    """A JVM class whose static methods are looked up once. Py4J's `JavaClass` asks the JVM what a name is on every
    attribute access, a round trip before every call: 799 of the 4,443 Py4J commands of a warm analysis of 15k
    events were `functions.col`, `functions.lit`, ... asked again (2026-11-28; 36 of 3,168 now). A method's
    `JavaMember` is stateless (its static target and the gateway's client, which gives each thread its own
    connection), so one serves every later call; a field or a nested class is still asked each time."""

    def __getattr__(self, name: str) -> object:
        member = super().__getattr__(name)
        if isinstance(member, JavaMember):
            self.__dict__[name] = member  # found before __getattr__ from now on
        return member
