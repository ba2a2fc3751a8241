"""Spark jobs for `memliner bench --spark`, in local mode on the driver JVM, or with executors.

    spark-job.py pagerank|groupby [--collector G1] [--heap 512m] [--scale N] [--jvm-flag F]...
                 [--executors N --executor-heap 768m]

The memliner agent, when wanted, comes in the MEMLINER_AGENT_OPTS environment variable (an
-agentpath: argument) and goes to the driver JVM through spark.driver.extraJavaOptions. With
--executors N the job runs on Spark's local-cluster master (N separate executor JVMs, one core
each) and the agent goes to the executors instead, through spark.executor.extraJavaOptions: give
it a stats path with %p or ending in / there, so that each executor writes its own file.
Integer arithmetic throughout, so the checksum is the same however the shuffle orders rows.
Prints one line: RESULT workload=spark-JOB checksum=HEX verified=true elapsed_ms=T
"""
import argparse
import os
import sys
import time


def session(args):
    from pyspark.sql import SparkSession

    java_opts = [f"-XX:+Use{args.collector}GC", f"-Xms{args.heap}"]
    java_opts.extend(args.jvm_flag)
    agent = os.environ.get("MEMLINER_AGENT_OPTS", "")
    b = SparkSession.builder.appName(f"memliner-{args.job}")
    if args.executors:
        # Executors are JVMs of their own: the agent, the collector and a fixed heap go there.
        mb = int(args.executor_heap.rstrip("mM"))
        executor_opts = [f"-XX:+Use{args.collector}GC", f"-Xms{args.executor_heap}"]
        executor_opts.extend(args.jvm_flag)
        if agent:
            executor_opts.append(agent)
        b = (
            b.master(f"local-cluster[{args.executors},1,{mb + 256}]")
            .config("spark.executor.memory", args.executor_heap)
            .config("spark.executor.extraJavaOptions", " ".join(executor_opts))
            .config("spark.driver.extraJavaOptions", " ".join(java_opts))
        )
    else:
        if agent:
            java_opts.append(agent)
        b = b.master("local[2]").config("spark.driver.extraJavaOptions", " ".join(java_opts))
    return (
        b.config("spark.driver.memory", args.heap)
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.adaptive.enabled", "false")
        .getOrCreate()
    )


def pagerank(spark, scale):
    """PageRank over a generated power-law-ish graph, ranks as fixed-point longs."""
    from pyspark.sql import functions as F

    n = 20_000 * scale
    degree = 8
    one = 1_000_000_000_000
    edges = (
        spark.range(n * degree)
        .select(
            (F.col("id") % n).alias("src"),
            # Skewed targets: small ids are popular.
            (F.pow(F.abs(F.xxhash64("id")) % 1_000_000 / 1_000_000.0, 3) * n)
            .cast("long")
            .alias("dst"),
        )
        .cache()
    )
    outdeg = edges.groupBy("src").count().withColumnRenamed("count", "deg").cache()
    ranks = spark.range(n).select(F.col("id"), F.lit(one // n).alias("rank"))
    for _ in range(10):
        contrib = (
            edges.join(ranks, edges.src == ranks.id)
            .join(outdeg, "src")
            .select(F.col("dst").alias("id"), (F.col("rank") / F.col("deg")).cast("long").alias("c"))
            .groupBy("id")
            .agg(F.sum("c").alias("s"))
        )
        ranks = (
            spark.range(n)
            .join(contrib, "id", "left")
            .select(
                "id",
                (F.lit(15 * one // 100 // n) + F.coalesce(F.col("s"), F.lit(0)) * 85 / 100)
                .cast("long")
                .alias("rank"),
            )
            .localCheckpoint()
        )
    return ranks.select(F.expr("bit_xor(xxhash64(id, rank))").alias("h")).collect()[0]["h"]


def groupby(spark, scale):
    """Aggregation with a wide shuffle: per-key sums, counts and maxima of generated rows."""
    from pyspark.sql import functions as F

    rows = 1_500_000 * scale
    df = spark.range(rows).select(
        (F.abs(F.xxhash64("id")) % 50_000).alias("k"),
        (F.col("id") * 7919 % 100_003).alias("v"),
        F.concat(F.lit("row-"), F.col("id").cast("string")).alias("s"),
    )
    agg = df.groupBy("k").agg(
        F.sum("v").alias("sv"),
        F.count("*").alias("n"),
        F.max("v").alias("mv"),
        F.max(F.length("s")).alias("ms"),
    )
    top = agg.orderBy(F.desc("sv"), "k").limit(1000)
    h1 = agg.select(F.expr("bit_xor(xxhash64(k, sv, n, mv, ms))").alias("h")).collect()[0]["h"]
    h2 = top.select(F.expr("bit_xor(xxhash64(k, sv))").alias("h")).collect()[0]["h"]
    return h1 ^ h2


def main():
    p = argparse.ArgumentParser()
    p.add_argument("job", choices=["pagerank", "groupby"])
    p.add_argument("--collector", default="G1")
    p.add_argument("--heap", default="512m")
    p.add_argument("--scale", type=int, default=1)
    # The JVMs are JAVA_HOME's (a GC-hook patched JDK wants -XX:+MemLinerLineUp here): the
    # driver's, and with --executors the executors' too.
    p.add_argument("--jvm-flag", action="append", default=[], help="a JVM option (driver and executors)")
    p.add_argument("--executors", type=int, default=0, help="executor JVMs (local-cluster)")
    p.add_argument("--executor-heap", default="768m", help="each executor's heap (MiB)")
    args = p.parse_args()
    t0 = time.time()
    spark = session(args)
    spark.sparkContext.setLogLevel("ERROR")
    h = (pagerank if args.job == "pagerank" else groupby)(spark, args.scale)
    spark.stop()
    ms = int((time.time() - t0) * 1000)
    print(
        f"RESULT workload=spark-{args.job} checksum={(h or 0) & 0xFFFFFFFFFFFFFFFF:x} "
        f"verified=true elapsed_ms={ms}",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())
