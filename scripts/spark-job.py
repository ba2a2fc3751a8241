"""Spark jobs for `memliner bench --spark`, in local mode on the driver JVM, or with executors.

    spark-job.py pagerank|groupby|lr|kmeans|cc [--collector G1] [--heap 512m] [--scale N] [--jvm-flag F]...
                 [--executors N --executor-heap 768m]

The memliner agent, when wanted, comes in the MEMLINER_AGENT_OPTS environment variable (an
-agentpath: argument) and goes to the driver JVM through spark.driver.extraJavaOptions. With
--executors N the job runs on Spark's local-cluster master (N separate executor JVMs, one core
each) and the agent goes to the executors instead, through spark.executor.extraJavaOptions: give
it a stats path with %p or ending in / there, so that each executor writes its own file.
Integer arithmetic throughout (the MLlib jobs' results rounded before they are folded), so the
checksum is the same however the shuffle orders rows. lr, kmeans and cc are the MemLiner
artifact's Spark jobs: logistic regression and KMeans (MLlib, over generated points) and a
connected-components (transitive closure) job by label propagation.
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


def fold(values):
    """A checksum of integers that does not depend on Python's hash seed."""
    h = 0
    for v in values:
        h = (h * 1_000_003 ^ (v & 0xFFFFFFFFFFFFFFFF)) & 0xFFFFFFFFFFFFFFFF
    return h


def points(spark, rows, dims, clusters):
    """Generated points: `clusters` centres, each point its centre plus hashed noise."""
    from pyspark.sql import functions as F

    def noise(j):
        return ((F.abs(F.xxhash64("id", F.lit(j))) % 2_000_001) - 1_000_000) / 1_000_000.0

    def centre(j):
        return ((F.col("id") % clusters) * (j + 1) % 7 - 3).cast("double")

    return spark.range(rows).select(
        "id", *[(centre(j) + noise(j)).alias(f"x{j}") for j in range(dims)]
    )


def features(df, dims):
    from pyspark.ml.feature import VectorAssembler

    return VectorAssembler(
        inputCols=[f"x{j}" for j in range(dims)], outputCol="features"
    ).transform(df)


def lr(spark, scale):
    """MLlib logistic regression: a label from a fixed linear rule plus noise."""
    from pyspark.ml.classification import LogisticRegression
    from pyspark.sql import functions as F

    dims = 10
    df = points(spark, 300_000 * scale, dims, 8)
    w = [(j % 5) - 2 for j in range(dims)]
    score = sum(F.col(f"x{j}") * w[j] for j in range(dims))
    noise = (F.abs(F.xxhash64("id", F.lit(99))) % 1000 - 500) / 250.0
    df = df.withColumn("label", ((score + noise) > 0).cast("double"))
    data = features(df, dims).select("features", "label").cache()
    model = LogisticRegression(maxIter=20, regParam=0.01, tol=0.0).fit(data)
    coef = list(model.coefficients) + [model.intercept]
    return fold(int(round(c * 1000)) for c in coef)


def kmeans(spark, scale):
    """MLlib KMeans over clustered points."""
    from pyspark.ml.clustering import KMeans

    dims, k = 8, 8
    data = features(points(spark, 300_000 * scale, dims, k), dims).select("features").cache()
    model = KMeans(k=k, seed=1, maxIter=20, tol=0.0).fit(data)
    centres = sorted(tuple(int(round(x * 100)) for x in c) for c in model.clusterCenters())
    return fold(v for c in centres for v in c)


def cc(spark, scale):
    """Connected components by label propagation: each vertex takes the smallest label among
    itself and its neighbours until nothing changes (at most 20 rounds)."""
    from pyspark.sql import functions as F

    n = 100_000 * scale
    # A sparse random graph (1.2 edges a vertex: many components), both directions.
    one = spark.range(n * 6 // 5).select(
        (F.abs(F.xxhash64("id", F.lit(1))) % n).alias("a"),
        (F.abs(F.xxhash64("id", F.lit(2))) % n).alias("b"),
    )
    edges = one.union(one.select(F.col("b").alias("a"), F.col("a").alias("b"))).cache()
    labels = spark.range(n).select(F.col("id").alias("v"), F.col("id").alias("label"))
    for _ in range(20):
        proposed = (
            edges.join(labels, edges.a == labels.v)
            .select(F.col("b").alias("v"), "label")
            .union(labels)
            .groupBy("v")
            .agg(F.min("label").alias("label"))
            .localCheckpoint()
        )
        changed = (
            proposed.withColumnRenamed("label", "new")
            .join(labels, "v")
            .where(F.col("new") != F.col("label"))
            .count()
        )
        labels = proposed
        if changed == 0:
            break
    components = labels.select("label").distinct().count()
    h = labels.select(F.expr("bit_xor(xxhash64(v, label))").alias("h")).collect()[0]["h"]
    return fold([components, h])


JOBS = {"pagerank": pagerank, "groupby": groupby, "lr": lr, "kmeans": kmeans, "cc": cc}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("job", choices=list(JOBS))
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
    h = JOBS[args.job](spark, args.scale)
    spark.stop()
    ms = int((time.time() - t0) * 1000)
    print(
        f"RESULT workload=spark-{args.job} checksum={(h or 0) & 0xFFFFFFFFFFFFFFFF:x} "
        f"verified=true elapsed_ms={ms}",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())
