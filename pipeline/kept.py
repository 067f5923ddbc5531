"""Frames an analysis computes once and reads many times: cached, or for a small history checkpointed locally.

A small history (one partition, `pipeline.session.small_history`) costs Spark almost nothing to compute
and a lot to plan, and most of the planning grows with the plan: a cached frame keeps its whole lineage in its
plan, so every frame derived from it (each check's filters, joins and aggregations) is analysed whole again,
compared with every cached plan, and its tasks serialise the RDD lineage behind it. For the reader's frame that
lineage holds the validation's sixty rules; for the expected deliveries, their joins. A local checkpoint
(`DataFrame.localCheckpoint`) stores the rows in the block manager as a cache does and gives a frame whose plan
is one leaf (keeping the partitioning: one partition needs no shuffle): a warm analysis of 15k events takes
about a sixth less. A large history keeps Spark's columnar cache (compressed, and a scan reads only the columns
it needs; a checkpoint stores whole rows).

Either way the rows are computed by the first job that reads them, and `release()` frees them. A checkpointed
frame's source is held until then too: its plan owns the SQL metrics the filling job reports to, which the driver
holds only through weak references; a source collected meanwhile made Spark log "Failed to update accumulator ...
attempted to access non-existent accumulator" (now and then in the warm service, every analysis under a JVM
collecting garbage every 20-50 ms).
"""
from __future__ import annotations

from pyspark import StorageLevel
from pyspark.sql import DataFrame


class KeptFrames:
    """Keeps frames for one analysis: `small` selects local checkpoints over the cache."""

    def __init__(self, small: bool) -> None:
        self.small = small
        self._frames: list[DataFrame] = []
        self._sources: list[DataFrame] = []  # what the checkpoints were made from (their plans own the metrics)

    def keep(self, df: DataFrame) -> DataFrame:
        """`df`, kept: its rows are computed once, by the first job that reads them."""
        kept = df.localCheckpoint(eager=False) if self.small else df.persist(StorageLevel.MEMORY_AND_DISK)
        self._frames.append(kept)
        if self.small:
            self._sources.append(df)
        return kept

    def release(self) -> None:
        """Free every frame kept here."""
        for df in self._frames:
            if self.small:  # the checkpoint's rows are the blocks of the RDD under its one-leaf plan
                df._jdf.queryExecution().analyzed().rdd().unpersist(False)
            else:
                df.unpersist()
        self._frames.clear()
        self._sources.clear()
