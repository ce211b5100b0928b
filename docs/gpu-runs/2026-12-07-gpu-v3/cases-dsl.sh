# Issue 50 item 3: the complete stack under nvidia-cutlass-dsl 4.8.1 (sourced by runs.sh). The 4.8.1 wheels come as
# .gpu/dsl/c1 .. cN (dsl-payload.sh; one per call): `run dsl-stage` in the calls that carry a part, `run dsl481` in
# the call that carries the last (or any later one). Nothing of the stack is changed: 4.8.1 goes into a venv of its
# own, ~/dsl481/venv, whose site-packages also holds zz-dsl481-stack.pth, a .pth file that adds the stack's
# site-packages after its own (site.addsitedir: the stack's own .pth files run too, 4.5.2's nvidia_cutlass_dsl.pth
# among them). A `--system-site-packages` venv would not do: the stack's interpreter is itself a venv
# (/opt/torch/.venv), and a venv made from it sees the base interpreter's site-packages, not the stack's. site reads
# .pth files in sorted order, so 4.8.1's nvidia_cutlass_dsl_packages.pth runs before zz-dsl481-stack.pth: then the
# venv's copy is the first portion of the namespace package `nvidia_cutlass_dsl`, and its dsl_packages goes first.
# The case proves which `cutlass` imports (which.txt) before it runs anything.
#   dsl-stage  copy this call's .gpu/dsl/cK to ~/dsl481/all and join the complete wheels (MANIFEST: sha256, size)
#   dsl481     the venv; which.txt; `check --cp 2 --deep` twice on one empty store (compiled, then served); the
#              kernel-store equality of the layout and dsa sub-runs (bench_kernel_store.py --no-tier2) if time is
#              left; the stack's `pip list` before and after (unchanged). Outputs: $R/dsl481/
DSL=~/dsl481

est_dsl-stage() { echo 15; }
needs_dsl-stage() { :; }  # no build: only files are copied
est_dsl481() { echo 240; }

dsl_stage() {  # the parts this call carries, joined; true when every wheel of the MANIFEST is complete
  local c sha size name parts dest n=0 have=0
  mkdir -p $DSL/all $DSL/wh
  for c in "$ROOT"/.gpu/dsl/c[0-9]*; do [ -d "$c" ] && cp -r "$c/." $DSL/all/; done
  [ -f $DSL/all/MANIFEST ] || { ts "dsl-stage: no MANIFEST (carry .gpu/dsl/c1)"; return 1; }
  while read -r sha size name; do
    [ -n "$name" ] || continue
    n=$(( n + 1 )); dest=$DSL/wh/$name
    if [ ! -f "$dest" ]; then
      parts=$(ls "$DSL/all/$name".part* 2> /dev/null | sort)
      if [ -n "$parts" ] && [ "$(cat $parts | wc -c)" = "$size" ]; then
        cat $parts > "$dest.tmp"
        if [ "$(sha256sum < "$dest.tmp" | cut -d' ' -f1)" = "$sha" ]; then mv "$dest.tmp" "$dest"
        else ts "dsl-stage: SHA MISMATCH $name"; rm -f "$dest.tmp"; fi
      fi
    fi
    [ -f "$dest" ] && have=$(( have + 1 ))
  done < $DSL/all/MANIFEST
  ts "dsl-stage: $have of $n wheels complete ($(du -sh $DSL/wh | cut -f1))"
  [ "$have" = "$n" ]
}

case_dsl-stage() { dsl_stage || true; }

dsl_stack_state() {  # the stack's CuTe-DSL-related packages, as its own pip lists them
  $PY -m pip list --disable-pip-version-check 2> /dev/null \
    | grep -i -E '^(nvidia-cutlass[a-z0-9-]*|apache-tvm-ffi|cuda-bindings|cuda-python|nvidia-cudnn-frontend|protobuf|torch) '
}

case_dsl481() {
  local out=$R/dsl481 v=$DSL/venv store=$WORK/dsl481-store py site lim s
  mkdir -p "$out"
  dsl_stage || { ts "dsl481: NOT RUN (the 4.8.1 wheels are not all staged)"; return; }
  dsl_stack_state > "$out/stack-before.txt"
  s=$(date +%s)
  rm -rf "$v" && $PY -m venv --without-pip "$v" || { ts "dsl481: venv FAILED"; return 1; }
  py=$v/bin/python
  site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  # the stack's site directories (purelib, platlib), after the venv's own: their .pth files run too
  $PY - "$site/zz-dsl481-stack.pth" <<'PYEOF'
import sys, sysconfig
dirs = list(dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib")))
open(sys.argv[1], "w").write("".join("import site; site.addsitedir(%r)\n" % d for d in dirs))
print("stack site directories:", dirs)
PYEOF
  # --ignore-installed: the stack's 4.5.2 (seen through the .pth) is neither uninstalled nor counted as present
  "$py" -m pip install --disable-pip-version-check --no-index --no-deps --no-compile --ignore-installed \
    $DSL/wh/*.whl > "$out/install.txt" 2>&1 || { ts "dsl481: install FAILED"; tail -5 "$out/install.txt"; return 1; }
  ts "dsl481: venv with 4.8.1 in $(( $(date +%s) - s )) s"
  "$py" - > "$out/which.txt" 2>&1 <<'PYEOF'
import importlib.metadata as md, sys
for d in ("nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-core", "nvidia-cutlass-dsl-libs-base",
          "nvidia-cutlass-dsl-libs-cu13", "nvidia-cutlass-dsl-libs-cu12", "apache-tvm-ffi", "nvidia-cudnn-frontend",
          "cuda-bindings", "torch"):
    try:
        dist = md.distribution(d)
        print("dist", d, dist.version, dist.locate_file(""))
    except md.PackageNotFoundError:
        print("dist", d, "not installed")
print("sys.path", [p for p in sys.path if "cutlass" in p or "site-packages" in p])
import cutlass
print("cutlass", cutlass.__version__, cutlass.__file__)
import cutlass._mlir._mlir_libs as libs
print("cutlass_ir", libs._cutlass_ir.__file__)
for name in ("cudnn", "tvm_ffi", "torch"):
    try:
        print(name, __import__(name).__version__)
    except Exception as exc:
        print(name, "FAILED", type(exc).__name__, exc)
PYEOF
  cat "$out/which.txt"
  grep -q "^cutlass 4.8.1 $v/" "$out/which.txt" || { ts "dsl481: NOT RUN (cutlass 4.8.1 from the venv does not import)"; return 1; }
  "$py" -m pip list --disable-pip-version-check > "$out/venv-pip-list.txt" 2>&1
  "$py" -m pip check --disable-pip-version-check > "$out/venv-pip-check.txt" 2>&1
  rm -rf "$store" && mkdir -p -m 700 "$store"
  for run in compiled served; do  # one empty store: every kernel compiled and stored, then served from it
    s=$(date +%s)
    (cd "$WORK" && DSV4_DOCTOR_PREWARM=off DSV4_DOCTOR_KERNEL_CACHE=$store DSV4_DOCTOR_KERNEL_IMAGE_CACHE=off \
      timeout -k 5 110 "$PY" -m dsv4_doctor check --cp 2 --deep --python "$py" -f json -o "$out/check-deep-$run.json") \
      > "$out/check-deep-$run.console.txt" 2>&1
    echo "exit $? in $(( $(date +%s) - s )) s" >> "$out/check-deep-$run.console.txt"
    ts "dsl481: check --deep ($run): $(tail -2 "$out/check-deep-$run.console.txt" | tr '\n' ' ')"
  done
  "$PY" - "$out" <<'PYEOF' | tee "$out/summary.txt"
import json, os, sys
for run in ("compiled", "served"):
    try:
        rep = json.load(open(os.path.join(sys.argv[1], "check-deep-%s.json" % run)))
    except (OSError, ValueError) as exc:
        print(run, "no report:", exc)
        continue
    print("==", run, rep.get("summary", {}).get("counts", rep.get("summary")))
    for c in rep["checks"]:
        if c["status"] != "pass" or c["id"].startswith(("cutlass", "smoke", "cudnn", "tvm", "deps")):
            print(" ", c["id"], c["status"], "|", c["summary"][:300])
PYEOF
  lim=$(( $(left) - 15 )); [ "$lim" -gt 170 ] && lim=170
  if [ "$lim" -ge 90 ]; then  # compiled / served / warmed / compiled again, for the layout and dsa sub-runs
    (cd "$ROOT" && timeout -k 5 "$lim" "$PY" benchmarks/bench_kernel_store.py --python "$py" --cp 2 --no-tier2 \
      --out "$out/equality") > "$out/equality.console.txt" 2>&1
    ts "dsl481: equality exit $? (limit $lim s)"; tail -15 "$out/equality.console.txt"
  else
    ts "dsl481: equality NOT RUN ($(left) s left)"
  fi
  dsl_stack_state > "$out/stack-after.txt"
  if cmp -s "$out/stack-before.txt" "$out/stack-after.txt"; then ts "dsl481: the stack's packages unchanged"
  else ts "dsl481: THE STACK CHANGED"; diff "$out/stack-before.txt" "$out/stack-after.txt"; fi
}
