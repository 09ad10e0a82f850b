#!/usr/bin/env bash
# Device side (the lent GPU machine; never in CI): a real data-parallel host and a latency gate
# under speculative decoding, two calls back to back after the shared recipe's staging
# (tests/gpu/README.md), each with `.gpu/run` and `.gpu/vp` carried (the first also `.gpu/cN`,
# copied to /root/stage first):
#   A: the env, two real vLLM 0.24.0 EAGLE-3 servers under one supervisord, the host's two
#      engines e0 (:8000) and e1 (:8002); a load client per engine, each on its own pace.
#   B: rollout `engines`: gpu-accept-all-slow (every draft accepted, each step 20 ms slower)
#      on the two-engine host, judged after/before per output token (`max_tpot_p99_ratio`)
#      with the per-step numbers beside; in the window after the patch the script restarts
#      engine e1 (supervisorctl: tens of seconds down, then its counters from zero): the
#      verdict and the numbers must read as if it had not. Then pip's bytes back, shutdown.
# Everything goes to $OUT: log.txt, the rollout's table and JSON report, the servers' logs'
# ends, the load clients' summaries, /metrics at the end.
set -u
PHASE=${1:-A}
G=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/gpu/lib.sh
. "$G/lib.sh"
RESTART=/tmp/restart-canary.sh
save() {  # two files (the device tool brings back 8 a call): the servers' logs' ends, the load summaries
  tail -n 150 $SV/*.log > "$OUT/servers.log" 2>/dev/null
  for f in /tmp/load-*.jsonl; do [ -f "$f" ] && sed "s|^|$(basename "$f" .jsonl) |" "$f"; done > "$OUT/load.txt"
}
roll() {  # roll NAME SPEC INVENTORY ARGS...: one rollout, its table and report into $OUT
  local name=$1 spec=$2 inv=$3; shift 3
  log "rollout $name: e0 pid $($CTL pid e0), e1 pid $($CTL pid e1)"
  vp rollout "$spec" --inventory "$inv" --level import --restart-timeout 600 --health-timeout 600 \
    --min-drafts 0 --report "$OUT/rollout-$name.json" "$@" > "$OUT/rollout-$name.txt" 2>&1
  local rc=$?
  tee -a "$M" < "$OUT/rollout-$name.txt"
  log "rollout $name: exit $rc; e0 pid $($CTL pid e0), e1 pid $($CTL pid e1)"
}
case "$PHASE" in
A)
  install_env || exit 1
  log "vpatch $(vp --version 2>&1); $("$PY" -I -c 'import torch; print(torch.cuda.get_device_name(0))' 2>&1 | tail -1)"
  # vLLM 0.24 asks for its share of the whole GPU and refuses to start when less than that is
  # free ("Free memory on device ... is less than desired GPU memory utilization"): two
  # engines of 0.35 each fit beside each other, whichever starts or restarts first.
  supervisor_conf "e0:$PY:8000:0.35" "e1:$PY:8002:0.35"
  cat > $RESTART <<SH
#!/bin/sh
# the canary host's restart: both engines, one after the other (each start measures the room)
$CTL stop e1 e0 >/dev/null || exit 1
$CTL start e0 >/dev/null || exit 1
for i in \$(seq 480); do curl -sf -m 2 -o /dev/null http://127.0.0.1:8000/health && break; sleep 0.5; done
$CTL start e1 >/dev/null || exit 1
for i in \$(seq 480); do curl -sf -m 2 -o /dev/null http://127.0.0.1:8002/health && exit 0; sleep 0.5; done
exit 1
SH
  chmod +x $RESTART
  canary_host="[[host]]
name = \"canary\"
address = \"local\"
python = \"$PY\"
restart = \"$RESTART\"
health = \"http://127.0.0.1:8000/health\"
metrics = [\"http://127.0.0.1:8000/metrics\", \"http://127.0.0.1:8002/metrics\"]"
  echo "$canary_host" > /tmp/hosts-engines.toml
  "$PY" -m supervisor.supervisord -c $SV/supervisord.conf || { log "supervisord did not start"; exit 1; }
  for s in e0:8000 e1:8002; do
    $CTL start "${s%%:*}" >/dev/null; healthy "http://127.0.0.1:${s##*:}" 300 "${s%%:*}" || { save; exit 1; }
  done
  load e0 8000 4; load e1 8002 4
  sleep 10
  save
  log "phase A done"
  ;;
B)
  [ -S $SV/supervisor.sock ] || { log "phase A's servers are gone"; exit 1; }
  (  # engine e1 restarted by this script once the window after the patch is running
    for _ in $(seq 1200); do
      grep -q 'running: in the window step' "$OUT/rollout-engines.json" 2>/dev/null && break
      sleep 0.5
    done
    sleep 5
    log "restarting engine e1 inside the window (pid $($CTL pid e1))"
    $CTL restart e1 >/dev/null
    healthy http://127.0.0.1:8002 300 e1
    log "engine e1 back (pid $($CTL pid e1))"
  ) &
  killer=$!
  roll engines "$G/specs/gpu-accept-all-slow.toml" /tmp/hosts-engines.toml \
    --window 120 --min-acceptance 0.4 --min-throughput-ratio 0.5
  kill $killer 2>/dev/null  # a rollout that ended before its window leaves it waiting
  wait $killer 2>/dev/null
  for p in 8000 8002; do echo "# :$p"; curl -s "http://127.0.0.1:$p/metrics"; done > "$OUT/metrics.txt"
  unload e0; unload e1
  vp rollback --python "$PY" >> "$M" 2>&1
  $CTL shutdown >> "$M" 2>&1
  save
  log "phase B done"
  ;;
esac
