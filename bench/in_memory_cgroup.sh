#!/usr/bin/env bash
# Runs a command, and every process it starts, under a memory limit, as a container's limit does (the chart's gateway
# pods: resources.limits.memory, 4Gi): a memory cgroup of its own (cgroup v2, or v1's memory controller), made for the
# run and removed after it. Prints the group's peak memory and whether the limit was hit. Needs root.
#
#   bench/in_memory_cgroup.sh 4G .venv/bin/python -m bench.hostile_uploads --bystander-model espeak
set -euo pipefail
if [ $# -lt 2 ]; then
    echo "usage: $0 LIMIT COMMAND [ARG...]   (LIMIT as the kernel takes it: 4G, 512M)" >&2
    exit 2
fi
limit=$1
shift
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    group="/sys/fs/cgroup$(awk -F: '$1 == "0" {print $3}' /proc/self/cgroup)/bench-$$"
    limit_file=memory.max peak_file=memory.peak
else
    group="/sys/fs/cgroup/memory$(awk -F: '$2 == "memory" {print $3}' /proc/self/cgroup)/bench-$$"
    limit_file=memory.limit_in_bytes peak_file=memory.max_usage_in_bytes
fi
mkdir "$group"
trap 'rmdir "$group"' EXIT
echo "$limit" >"$group/$limit_file"
status=0
bash -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' _ "$group" "$@" || status=$?
peak=$(cat "$group/$peak_file" 2>/dev/null || echo unknown)
if [ -f "$group/memory.events" ]; then
    hits=$(awk '$1 == "max" {print $2}' "$group/memory.events")
else
    hits=$(cat "$group/memory.failcnt")
fi
echo "memory cgroup: limit $(cat "$group/$limit_file") bytes, peak $peak bytes, limit reached $hits times" >&2
exit $status
