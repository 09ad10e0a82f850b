#!/usr/bin/env bash
# Device side (the lent H200; never in CI): `bash tests/gpu/rollout.sh` from the repo root, in
# the last call of the shared recipe's staging (tests/gpu/README.md). A real vLLM 0.24.0 EAGLE-3
# server under supervisord, and two real `vpatch rollout` runs against it:
#   1. gpu-harmless, --min-acceptance 0.4: the gate fails on the real counters (dummy weights
#      accept 0 %), the spec is rolled back, the server restarted and healthy again: exit 1;
#   2. gpu-accept-all-drafts: the gate passes (100 %), the server runs the new code (new pid):
#      exit 0.
# Everything it learns goes to $OUT: log.txt, each rollout's human table and JSON report,
# supervisord's and the server's logs, /metrics before and after.
set -u
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
export TVM_FFI_DISABLE_TORCH_C_DLPACK=1
export VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_USE_FUSED_MOE_GROUPED_TOPK=0
G=$(cd "$(dirname "$0")" && pwd)
R=$(pwd)/.gpu/run
M=$OUT/log.txt
log() { echo "[$(date +%T) t=${SECONDS}s] $*" | tee -a "$M"; }
if [ ! -x /tmp/venv/bin/python ]; then
  got=$(cat /root/stage/part.* | sha256sum | cut -c1-64)
  [ "$got" = "$(cat "$R/payload.sha256")" ] || { log "payload checksum differs: $got"; exit 1; }
  mkdir -p /root/p && cat /root/stage/part.* | xz -T0 -dc | tar -x -C /root/p || { log "untar failed"; exit 1; }
  python3 -m venv --without-pip /tmp/venv
  SP=$(echo /tmp/venv/lib/python3.*/site-packages)
  BASE=$(python3 -c "import sys;print(repr([p for p in sys.path if p.endswith(('site-packages','dist-packages'))]))")
  echo "import site; [site.addsitedir(p) for p in $BASE]" > "$SP/zz_base_env.pth"   # the image's torch
  cp -r /root/p/site/. "$SP/"
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$SP" /root/p/whl/*.whl
fi
SP=$(echo /tmp/venv/lib/python3.*/site-packages)
# This checkout's vpatch (built just before the call, carried in .gpu/vp) over the payload's.
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SP" "$(pwd)"/.gpu/vp/*.whl
PY=/tmp/venv/bin/python
vp() { "$PY" -c 'import sys; from patcher.entry import main; sys.exit(main())' "$@"; }
log "vpatch $(vp --version 2>&1)"
URL=http://127.0.0.1:8000
SV=/tmp/sv; mkdir -p $SV
SPEC_CFG='{"method":"eagle3","model":"'$R'/drafter","num_speculative_tokens":3}'
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
command=$PY -m vllm.entrypoints.openai.api_server --model $R/target --served-model-name tiny-dsv3 --speculative-config '$SPEC_CFG' --load-format dummy --enforce-eager --max-model-len 2048 --gpu-memory-utilization 0.3 --skip-tokenizer-init --host 127.0.0.1 --port 8000
directory=/tmp
autostart=true
autorestart=false
startsecs=1
stopasgroup=true
killasgroup=true
stopsignal=INT
stopwaitsecs=40
redirect_stderr=true
stdout_logfile=$SV/vllm.log
stdout_logfile_maxbytes=0
CONF
CTL="$PY -m supervisor.supervisorctl -c $SV/supervisord.conf"
healthy() {  # healthy TIMEOUT: until /health answers 200
  local t0=$SECONDS
  while [ $((SECONDS - t0)) -lt "$1" ]; do
    [ "$(curl -s -o /dev/null -w '%{http_code}' -m 2 $URL/health)" = 200 ] && { log "healthy after $((SECONDS - t0)) s"; return 0; }
    sleep 0.5
  done
  log "not healthy in $1 s"; tail -40 $SV/vllm.log; return 1
}
"$PY" -m supervisor.supervisord -c $SV/supervisord.conf || { log "supervisord did not start"; exit 1; }
healthy 300 || { cp $SV/*.log "$OUT/" 2>/dev/null; exit 1; }
log "server pid $($CTL pid vllm)"
# Load for the whole run: a client of its own process group, stopped by its id at the end.
python3 -c 'import os, sys; os.setsid(); os.execvp(sys.argv[1], sys.argv[1:])' bash -c \
  "while true; do python3 $R/traffic.py $URL/v1/completions 16 8 64 \$RANDOM >/dev/null 2>&1 || sleep 1; done" &
LOAD=$!
curl -s $URL/metrics > "$OUT/metrics-before.txt"
roll() {  # roll NAME SPEC: one rollout, its table and report in $OUT
  local pid0; pid0=$($CTL pid vllm)
  log "rollout $1 (server pid $pid0)"
  vp rollout "$2" --python "$PY" --level import \
    --restart "$CTL restart vllm" --health $URL/health --health-timeout 300 \
    --metrics $URL/metrics --window 30 --min-drafts 300 --min-acceptance 0.4 \
    --report "$OUT/rollout-$1.json" > "$OUT/rollout-$1.txt" 2>&1
  local rc=$?
  cat "$OUT/rollout-$1.txt" | tee -a "$M"
  log "rollout $1: exit $rc; server pid $pid0 -> $($CTL pid vllm); health $(curl -s -o /dev/null -w '%{http_code}' -m 2 $URL/health)"
}
roll harmless "$G/specs/gpu-harmless.toml"
log "after rollout 1: $(vp status --python "$PY" 2>&1 | tail -1)"
roll accept-all "$G/specs/gpu-accept-all-drafts.toml"
curl -s $URL/metrics > "$OUT/metrics-after.txt"
grep -E '^vllm:spec_decode_num_(drafts|draft_tokens|accepted_tokens)_total' "$OUT/metrics-after.txt" | tee -a "$M"
kill -TERM -- "-$LOAD" 2>/dev/null
vp rollback --python "$PY" >> "$M" 2>&1
$CTL shutdown >> "$M" 2>&1
cp $SV/vllm.log "$OUT/server.log" 2>/dev/null
log "done"
