#!/usr/bin/env bash
# Installs PySpark (with its Spark jars) from PyPI into target/spark-venv, for the Spark jobs
# of `memliner bench --spark`. About 450 MB; idempotent.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/target/spark-venv"
if "$venv/bin/python" -c "import pyspark, numpy" 2>/dev/null; then
    echo "pyspark already installed in $venv"
    exit 0
fi
python3 -m venv "$venv"
# numpy: MLlib's Python side (the lr and kmeans jobs).
"$venv/bin/pip" install --quiet "pyspark>=3.5" numpy
"$venv/bin/python" -c "import pyspark; print('installed pyspark', pyspark.__version__, 'in $venv')"
