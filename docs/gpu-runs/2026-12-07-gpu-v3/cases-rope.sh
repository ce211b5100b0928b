# The fused MLA RoPE sub-run of the kernel smoke (checks/smoke/dsv4probe_kernels_rope.py), sourced by runs.sh:
#   rope   `check --only smoke.dsv4-kernels --dsa-backend none` at CP 1 (the layer's direct fused_mla_rope_inplace
#          call), then, as the time allows, at CP 2 (cp_utils' per-rank calls; the layout sub-run runs beside it):
#          rope/rope-cp1.json, rope/rope-cp2.json (the reports), rope/*.console.txt, and rope/summary.txt: per run the
#          sub-run's status, its worst max |diff| / max rel / rel L2 forward and backward (the figures the
#          tolerances in dsv4probe_smoke_tolerances.py are set from), and the negative control's proof (the
#          inverse rotation's figures, which must fail the comparison: control_failed_comparison true).
# Needs no build of the batch (Megatron d48bd6be on PYTHONPATH and torch's triton only).

est_rope() { echo 90; }
needs_rope() { :; }

case_rope() {
  local out=$R/rope t0=$SECONDS
  mkdir -p "$out" "$WORK/rope" && cd "$WORK/rope" || return
  # CP 1 first (what the default check runs): importing megatron.core (~15 s cold) and triton's autotune of the
  # kernel (8 BLOCK_H configs, forward and backward, for 64 heads and for 1) dominate; CP 2 compiles the kernel's
  # position_ids variant, so it gets what is left of the 85 s, if at least 20 s.
  rope_run "$out" 1 60
  if [ "$(( 85 - (SECONDS - t0) ))" -ge 20 ] && [ "$(left)" -gt 30 ]; then
    rope_run "$out" 2 $(( 85 - (SECONDS - t0) ))
  else
    echo "cp 2: NOT RUN (no time left within the case's 90 s; the complete check --deep run covers CP 2)" \
      >> "$out/summary.txt"
  fi
  ts "rope: $(tr '\n' ' ' < "$out/summary.txt" | cut -c 1-600) ($(( SECONDS - t0 )) s)"
}

rope_run() {  # OUT CP LIMIT_S
  local out=$1 cp=$2 lim=$3 t=$SECONDS
  { echo "\$ python3 -m dsv4_doctor check --only smoke.dsv4-kernels --dsa-backend none --cp $cp -f json -o rope-cp$cp.json"
    timeout -k 5 "$lim" "$PY" -m dsv4_doctor check --only smoke.dsv4-kernels --dsa-backend none --cp "$cp" \
      -f json -o "$out/rope-cp$cp.json"; echo "exit $? after $(( SECONDS - t )) s"; } > "$out/rope-cp$cp.console.txt" 2>&1
  "$PY" - "$out/rope-cp$cp.json" "$cp" >> "$out/summary.txt" 2>&1 <<'PYEOF'
import json, sys
path, cp = sys.argv[1], sys.argv[2]
try:
    report = json.load(open(path))
except Exception as exc:
    print("cp %s: no report (%s: %s)" % (cp, type(exc).__name__, exc)); sys.exit(0)
row = next((c for c in report.get("checks", []) if c.get("id") == "smoke.dsv4-kernels"), {})
rope = ((row.get("evidence") or {}).get("subruns") or {}).get("rope") or {}
ev = rope.get("evidence") or {}
print("cp %s: row %s; rope %s: %s" % (cp, row.get("status"), rope.get("status"), rope.get("summary")))
print("cp %s: device %s, total %s s, triton %s, megatron-core %s" % (
    cp, (rope.get("device") or {}).get("name"), rope.get("total_s"), ev.get("triton"), ev.get("package")))
for direction, w in sorted((ev.get("worst") or {}).items()):
    print("cp %s: worst %s: max_abs %.6g max_rel %.6g rel_l2 %.6g" % (cp, direction, w["max_abs"], w["max_rel"],
                                                                       w["rel_l2"]))
for c in ev.get("comparisons") or []:
    print("cp %s:   %s %s %s%s ok=%s max_abs=%s rel_l2=%s" % (
        cp, c.get("rope"), c.get("tensor"), c.get("direction"),
        " rank %s" % c["cp_rank"] if "cp_rank" in c else "", c.get("ok"), c.get("max_abs"), c.get("rel_l2")))
control = ev.get("control") or {}
print("cp %s: negative control (%s): ok=%s max_abs=%s rel_l2=%s -> control_failed_comparison=%s (must be True)" % (
    cp, control.get("what"), control.get("ok"), control.get("max_abs"), control.get("rel_l2"),
    ev.get("control_failed_comparison")))
print("cp %s: tolerances %s" % (cp, json.dumps(ev.get("tolerances"))))
PYEOF
}
