#!/usr/bin/env bash
# Device side (the lent H200; never in CI): canary analysis against a control host on a real
# vLLM 0.24.0 EAGLE-3 server pair. `bash tests/gpu/canary.sh A` then `bash tests/gpu/canary.sh B`,
# the two calls back to back after the shared recipe's staging (tests/gpu/README.md; each call
# stays under the device tool's 10 minutes, supervisord and the load clients live on between
# them in sessions of their own).
#   A: the payload into /tmp/venv, a second env /tmp/venv2 (hard links: a patch of the canary
#      replaces its files by rename and never touches the control's), two servers under one
#      supervisord (canary :8000, control :8001, each 0.3 of the GPU), load on both, then
#      rollout 1: gpu-harmless --control 1 (dummy weights accept 0 %): rolled back.
#   B: rollout 2: gpu-accept-all-slow --control 1, the load doubled on both hosts during it:
#      acceptance holds (100 %); its gate is latency per output token against the control's
#      (each step 20 ms slower, 4 tokens a step); rollout 3: gpu-accept-all-drafts --control 1:
#      kept. Then shutdown. (The spec once gated the per-step latency and was rolled back on
#      it while its requests finished faster: docs/rollout.md.)
# Everything goes to $OUT: log.txt, each rollout's table and JSON report, the servers' logs.
set -u
PHASE=${1:-A}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
export TVM_FFI_DISABLE_TORCH_C_DLPACK=1
export VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_USE_FUSED_MOE_GROUPED_TOPK=0
G=$(cd "$(dirname "$0")" && pwd)
R=$(pwd)/.gpu/run
M=$OUT/log.txt
log() { echo "[$(date +%T) t=${SECONDS}s] $*" | tee -a "$M"; }
PY=/tmp/venv/bin/python
PY2=/tmp/venv2/bin/python
SV=/tmp/sv
CTL="$PY -m supervisor.supervisorctl -c $SV/supervisord.conf"
vp() { "$PY" -c 'import sys; from patcher.entry import main; sys.exit(main())' "$@"; }
healthy() {  # healthy URL TIMEOUT
  local t0=$SECONDS
  while [ $((SECONDS - t0)) -lt "$2" ]; do
    [ "$(curl -s -o /dev/null -w '%{http_code}' -m 2 "$1/health")" = 200 ] && { log "$1 healthy after $((SECONDS - t0)) s"; return 0; }
    sleep 0.5
  done
  log "$1 not healthy in $2 s"; tail -n 30 $SV/*.log; return 1
}
load() {  # load NAME CONC: a client loop on both servers, in a session of its own; pid in /tmp/load-NAME
  python3 -c 'import os, sys; os.setsid(); os.execvp(sys.argv[1], sys.argv[1:])' bash -c \
    "while true; do python3 $R/traffic.py http://127.0.0.1:8000/v1/completions 16 $2 64 \$RANDOM >/dev/null 2>&1 & python3 $R/traffic.py http://127.0.0.1:8001/v1/completions 16 $2 64 \$RANDOM >/dev/null 2>&1; wait; done" &
  echo $! > /tmp/load-$1
}
unload() { [ -f /tmp/load-$1 ] && kill -TERM -- "-$(cat /tmp/load-$1)" 2>/dev/null; rm -f /tmp/load-$1; }
roll() {  # roll NAME SPEC: one rollout over both hosts, the last (control) only scraped
  log "rollout $1 (canary pid $($CTL pid vllm), control pid $($CTL pid control))"
  vp rollout "$2" --inventory /tmp/hosts.toml --level import --control 1 \
    --health-timeout 300 --window 20 --max-window 60 --scrape-every 2 --min-drafts 0 --min-acceptance 0.4 \
    --report "$OUT/rollout-$1.json" > "$OUT/rollout-$1.txt" 2>&1
  local rc=$?
  tee -a "$M" < "$OUT/rollout-$1.txt"
  log "rollout $1: exit $rc; canary pid $($CTL pid vllm); control pid $($CTL pid control)"
}
if [ "$PHASE" = A ]; then
  up() { [ "$(curl -s -o /dev/null -w '%{http_code}' -m 2 "http://127.0.0.1:$1/health")" = 200 ]; }
  if up 8000 && up 8001; then  # a second try of phase A on the same machine: servers kept
    log "both servers up already"
    roll harmless "$G/specs/gpu-harmless.toml"
    log "phase A done"
    exit 0
  fi
  [ -S $SV/supervisor.sock ] && { $CTL shutdown >/dev/null 2>&1; sleep 5; }
  if [ ! -x /tmp/venv2/bin/python ]; then
  got=$(cat /root/stage/part.* | sha256sum | cut -c1-64)
  [ "$got" = "$(cat "$R/payload.sha256")" ] || { log "payload checksum differs: $got"; exit 1; }
  mkdir -p /root/p && cat /root/stage/part.* | xz -T0 -dc | tar -x -C /root/p || { log "untar failed"; exit 1; }
  python3 -m venv --without-pip /tmp/venv
  SP=$(echo /tmp/venv/lib/python3.*/site-packages)
  BASE=$(python3 -c "import sys;print(repr([p for p in sys.path if p.endswith(('site-packages','dist-packages'))]))")
  echo "import site; [site.addsitedir(p) for p in $BASE]" > "$SP/zz_base_env.pth"
  cp -r /root/p/site/. "$SP/"
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$SP" /root/p/whl/*.whl
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SP" "$(pwd)"/.gpu/vp/*.whl
  cp -al /tmp/venv /tmp/venv2
  fi
  log "vpatch $(vp --version 2>&1); envs $PY $PY2"
  SPEC_CFG='{"method":"eagle3","model":"'$R'/drafter","num_speculative_tokens":3}'
  mkdir -p $SV
  ARGS="--model $R/target --served-model-name tiny-dsv3 --speculative-config '$SPEC_CFG' --load-format dummy --enforce-eager --max-model-len 2048 --skip-tokenizer-init --host 127.0.0.1"
  cat > $SV/supervisord.conf <<CONF
[unix_http_server]
file=$SV/supervisor.sock
[supervisord]
logfile=$SV/supervisord.log
pidfile=$SV/supervisord.pid
directory=/tmp
[rpcinterface:supervisor]
supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface
[supervisorctl]
serverurl=unix://$SV/supervisor.sock
[program:vllm]
command=$PY -m vllm.entrypoints.openai.api_server $ARGS --gpu-memory-utilization 0.65 --port 8000
directory=/tmp
autostart=false
autorestart=false
startsecs=1
stopasgroup=true
killasgroup=true
stopsignal=INT
stopwaitsecs=40
redirect_stderr=true
stdout_logfile=$SV/vllm.log
stdout_logfile_maxbytes=0
[program:control]
command=$PY2 -m vllm.entrypoints.openai.api_server $ARGS --gpu-memory-utilization 0.3 --port 8001
directory=/tmp
autostart=false
autorestart=false
startsecs=1
stopasgroup=true
killasgroup=true
stopsignal=INT
stopwaitsecs=40
redirect_stderr=true
stdout_logfile=$SV/control.log
stdout_logfile_maxbytes=0
CONF
  cat > /tmp/hosts.toml <<TOML
[[host]]
name = "canary"
address = "local"
python = "$PY"
restart = "$CTL restart vllm"
health = "http://127.0.0.1:8000/health"
metrics = "http://127.0.0.1:8000/metrics"

[[host]]
name = "control"
address = "local"
python = "$PY2"
metrics = "http://127.0.0.1:8001/metrics"
TOML
  "$PY" -m supervisor.supervisord -c $SV/supervisord.conf || { log "supervisord did not start"; exit 1; }
  # vLLM's memory share counts what the GPU's other processes hold: the control (0.3) first,
  # then the canary's budget (0.65 of the GPU, the control's share included)
  $CTL start control >/dev/null; healthy http://127.0.0.1:8001 240 || { cp $SV/*.log "$OUT/"; exit 1; }
  $CTL start vllm >/dev/null; healthy http://127.0.0.1:8000 240 || { cp $SV/*.log "$OUT/"; exit 1; }
  load base 4
  sleep 10
  roll harmless "$G/specs/gpu-harmless.toml"
  cp $SV/*.log "$OUT/" 2>/dev/null
  log "phase A done"
else
  [ -x "$PY" ] && [ -S $SV/supervisor.sock ] || { log "phase A's servers are gone"; exit 1; }
  # the load doubles on both hosts shortly into the window: after/before would see it, canary
  # against control does not
  ( sleep 45; load extra 4 ) &
  roll slow "$G/specs/gpu-accept-all-slow.toml"
  unload extra
  roll accept-all "$G/specs/gpu-accept-all-drafts.toml"
  curl -s http://127.0.0.1:8000/metrics > "$OUT/metrics-canary.txt"
  curl -s http://127.0.0.1:8001/metrics > "$OUT/metrics-control.txt"
  grep -E '^vllm:spec_decode_num_(drafts|accepted_tokens)_total' "$OUT/metrics-canary.txt" | tee -a "$M"
  unload base
  vp rollback --python "$PY" >> "$M" 2>&1
  $CTL shutdown >> "$M" 2>&1
  cp $SV/*.log "$OUT/" 2>/dev/null
  log "phase B done"
fi
