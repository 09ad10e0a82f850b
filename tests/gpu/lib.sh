# Sourced by the device-side scripts of tests/gpu (never in CI): the environment a real vLLM
# 0.24.0 server needs on the lent GPU machine, the payload's install, and the helpers every
# run uses. Expects $OUT (the device tool's output folder) and the repo root as the cwd.
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
export TVM_FFI_DISABLE_TORCH_C_DLPACK=1
# 0.24 imports flashinfer for its sampler unless told not to; flashinfer is not carried.
export VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_USE_FUSED_MOE_GROUPED_TOPK=0
R=$(pwd)/.gpu/run
M=$OUT/log.txt
PY=/tmp/venv/bin/python
SV=/tmp/sv
CTL="$PY -m supervisor.supervisorctl -c $SV/supervisord.conf"
SPEC_CFG='{"method":"eagle3","model":"'$R'/drafter","num_speculative_tokens":3}'
SERVE="-m vllm.entrypoints.openai.api_server --model $R/target --served-model-name tiny-dsv3 --speculative-config '$SPEC_CFG' --load-format dummy --enforce-eager --max-model-len 2048 --skip-tokenizer-init --host 127.0.0.1"
log() { echo "[$(date +%T) t=${SECONDS}s] $*" | tee -a "$M"; }
vp() { "$PY" -c 'import sys; from patcher.entry import main; sys.exit(main())' "$@"; }
healthy() {  # healthy URL TIMEOUT [PROGRAM]: gives up at once when PROGRAM (supervisord's) exited
  local t0=$SECONDS
  while [ $((SECONDS - t0)) -lt "$2" ]; do
    [ "$(curl -s -o /dev/null -w '%{http_code}' -m 2 "$1/health")" = 200 ] && { log "$1 healthy after $((SECONDS - t0)) s"; return 0; }
    if [ -n "${3:-}" ] && ! $CTL status "$3" | grep -qE 'RUNNING|STARTING'; then
      log "$3 exited before $1 was healthy"; tail -n 30 $SV/*.log; return 1
    fi
    sleep 0.5
  done
  log "$1 not healthy in $2 s"; tail -n 30 $SV/*.log; return 1
}
install_env() {  # the staged payload into /tmp/venv (the image's torch visible), this checkout's vpatch over it
  if [ ! -x "$PY" ]; then
    local got SP BASE
    got=$(cat /root/stage/part.* | sha256sum | cut -c1-64)
    [ "$got" = "$(cat "$R/payload.sha256")" ] || { log "payload checksum differs: $got"; return 1; }
    mkdir -p /root/p && cat /root/stage/part.* | xz -T0 -dc | tar -x -C /root/p || { log "untar failed"; return 1; }
    python3 -m venv --without-pip /tmp/venv
    SP=$(echo /tmp/venv/lib/python3.*/site-packages)
    BASE=$(python3 -c "import sys;print(repr([p for p in sys.path if p.endswith(('site-packages','dist-packages'))]))")
    echo "import site; [site.addsitedir(p) for p in $BASE]" > "$SP/zz_base_env.pth"
    cp -r /root/p/site/. "$SP/"
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$SP" /root/p/whl/*.whl
  fi
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade \
    --target "$(echo /tmp/venv/lib/python3.*/site-packages)" "$(pwd)"/.gpu/vp/*.whl
}
supervisor_conf() {  # supervisor_conf NAME:PYTHON:PORT:SHARE ... -> $SV/supervisord.conf, one program each
  mkdir -p $SV
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
CONF
  local p name py port share
  for p in "$@"; do
    IFS=: read -r name py port share <<< "$p"
    cat >> $SV/supervisord.conf <<CONF
[program:$name]
command=$py $SERVE --gpu-memory-utilization $share --port $port
directory=/tmp
autostart=false
autorestart=false
startsecs=1
stopasgroup=true
killasgroup=true
stopsignal=INT
stopwaitsecs=40
redirect_stderr=true
stdout_logfile=$SV/$name.log
stdout_logfile_maxbytes=0
CONF
  done
}
load() {  # load NAME PORT CONC: a client loop on one server, in a session of its own, on no other server's pace; pid in /tmp/load-NAME
  python3 -c 'import os, sys; os.setsid(); os.execvp(sys.argv[1], sys.argv[1:])' bash -c \
    "while true; do python3 $R/traffic.py http://127.0.0.1:$2/v1/completions 16 $3 64 \$RANDOM >> /tmp/load-$1.jsonl 2>/dev/null; done" &
  echo $! > /tmp/load-$1.pid
}
unload() { [ -f /tmp/load-$1.pid ] && kill -TERM -- "-$(cat /tmp/load-$1.pid)" 2>/dev/null; rm -f /tmp/load-$1.pid; }
