#!/usr/bin/env bash
# Spark pagerank in local mode (see spark-job.py). With the agent:
#   MEMLINER_AGENT_OPTS="-agentpath:$PWD/target/release/libmemliner_agent.so=server=HOST:PORT,local=25%" \
#       scripts/spark-pagerank.sh
# or let memliner start a server and set the variable:
#   memliner bench --spark   (runs it in the matrix)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
py="$root/target/spark-venv/bin/python"
[ -x "$py" ] || { echo "no PySpark: run scripts/spark-setup.sh first" >&2; exit 2; }
exec "$py" "$root/scripts/spark-job.py" pagerank "$@"
