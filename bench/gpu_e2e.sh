#!/usr/bin/env bash
# GPU end-to-end check of the runner: `medhelm-local serve vllm` serves a small local model, a PubMedQA sample
# runs through it, and the run's manifest, throughput and cost are printed.
#
# NOT YET RUN: no GPU host was available when this script was written (issue 4). Everything up to `vllm serve`
# is covered by tests/inference/test_vllm.py with a fake `vllm` executable; this script is the check that
# needs the real thing. Run it on a GPU host and keep its output with the release notes.
#
# Needs: an NVIDIA GPU; vLLM >= 0.10.1 (`pip install 'medhelm-local[vllm]'`, or the appliance's GPU image);
# the weights of a small instruct model on local disk (e.g. Qwen2.5-0.5B-Instruct, a Hugging Face snapshot
# directory). No network is used: vLLM runs with HF_HUB_OFFLINE=1 and the data is the bundled PubMedQA sample.
#
# Usage: bench/gpu_e2e.sh WEIGHTS_DIR [SERVED_NAME] [INSTANCES]
#   env: PORT (8011), TP (tensor-parallel size, 1), MAX_LEN (4096), GPU_MEM (0.85), MEDHELM (medhelm-local)
set -euo pipefail

WEIGHTS=${1:?usage: bench/gpu_e2e.sh WEIGHTS_DIR [SERVED_NAME] [INSTANCES]}
NAME=${2:-small-model}
INSTANCES=${3:-60}
PORT=${PORT:-8011}
TP=${TP:-1}
MAX_LEN=${MAX_LEN:-4096}
GPU_MEM=${GPU_MEM:-0.85}
MEDHELM=${MEDHELM:-medhelm-local}
PYTHON=${PYTHON:-python3}

WORK=$(mktemp -d -t medhelm-gpu-e2e-XXXXXX)
export MEDHELM_HOME="$WORK/home"
# The key lives in the environment only: vLLM reads VLLM_API_KEY, the runner reads api_key_env.
E2E_VLLM_KEY=$("$PYTHON" -c 'import secrets; print(secrets.token_urlsafe(24))')
export E2E_VLLM_KEY
SERVE_PID=""
cleanup() {
    if [[ -n "$SERVE_PID" ]] && kill -0 "$SERVE_PID" 2>/dev/null; then
        kill -TERM "$SERVE_PID"; wait "$SERVE_PID" || true
    fi
}
trap cleanup EXIT

echo "== home: $MEDHELM_HOME"
"$MEDHELM" init --json >/dev/null
"$PYTHON" - "$WEIGHTS" "$NAME" "$PORT" "$MAX_LEN" <<'PY'
import sys
from pathlib import Path
from medhelm_local.home import Home, resolve_home
from medhelm_local.home.config import BackendKind, ModelEndpoint, Pricing
weights, name, port, max_len = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
home = Home(resolve_home(None))
config = home.config.model_copy(deep=True)
config.models.append(ModelEndpoint(
    name="gpu-e2e", kind=BackendKind.VLLM, base_urls=[f"http://127.0.0.1:{port}/v1"], served_model=name,
    weights_path=Path(weights), api_key_env="E2E_VLLM_KEY", context_length=max_len, timeout_s=300,
    pricing=Pricing(gpu_hour_rate=2.5, gpus=1)))
home.save_config(config)
PY

SAMPLE=$("$PYTHON" -c 'from medhelm_local.demo.run_demo import pubmedqa_sample_path; print(pubmedqa_sample_path())')
"$MEDHELM" datasets register pubmedqa "$SAMPLE" --json >/dev/null

echo "== vllm serve command (dry run)"
"$MEDHELM" serve vllm --model gpu-e2e --tensor-parallel-size "$TP" --gpu-memory-utilization "$GPU_MEM" --dry-run --json

echo "== starting vLLM (waits on /health)"
"$MEDHELM" serve vllm --model gpu-e2e --tensor-parallel-size "$TP" --gpu-memory-utilization "$GPU_MEM" \
    --json >"$WORK/serve.json" &
SERVE_PID=$!
for _ in $(seq 1 900); do
    if curl -sf "http://127.0.0.1:$PORT/health" >/dev/null; then break; fi
    kill -0 "$SERVE_PID" 2>/dev/null || { echo "vllm serve exited during startup" >&2; exit 1; }
    sleep 2
done
curl -sf "http://127.0.0.1:$PORT/version"; echo

echo "== run through it"
"$MEDHELM" run --model gpu-e2e --benchmarks pubmedqa --max-instances "$INSTANCES" --json | tee "$WORK/run.json"
RUN_ID=$("$PYTHON" -c 'import json,sys; print(json.load(open(sys.argv[1]))["run_id"])' "$WORK/run.json")

echo "== kill -9 mid-run and resume (same command)"
"$MEDHELM" run --model gpu-e2e --benchmarks pubmedqa --new-run --json >/dev/null &
RUN_PID=$!
sleep 20
kill -9 "$RUN_PID" 2>/dev/null || true
wait "$RUN_PID" 2>/dev/null || true
"$MEDHELM" run --model gpu-e2e --benchmarks pubmedqa --json | "$PYTHON" -c \
    'import json,sys; d=json.load(sys.stdin); print("resumed run", d["run_id"], d["status"], "sent", d["session"]["sent"])'

echo "== manifest and cost of $RUN_ID"
"$MEDHELM" runs manifest "$RUN_ID" | "$PYTHON" -c \
    'import json,sys; d=json.load(sys.stdin); m=d["manifest"]; print("manifest_sha256", d["manifest_sha256"]); print("servers", m["model"]["servers"]); print("weights_sha256", (m["model"]["weights"] or {}).get("sha256"))'
"$MEDHELM" runs show "$RUN_ID" --json | "$PYTHON" -c \
    'import json,sys; d=json.load(sys.stdin); print(json.dumps({k: d["cost"][k] for k in ("method","prompt_tokens","completion_tokens","wall_s","gpu_hours","total")}, indent=1))'
echo "== ok: $WORK"
