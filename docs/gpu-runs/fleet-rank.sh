#!/bin/sh
# One torchrun worker of the fleet drift run: torchrun gives every worker the same environment, so this wrapper
# puts a per-rank directory first on PYTHONPATH (FLEET_PYTHONPATH_<LOCAL_RANK>, empty or unset: none), then runs
# the doctor with the arguments torchrun passed.
eval "extra=\${FLEET_PYTHONPATH_${LOCAL_RANK:-0}:-}"
if [ -n "$extra" ]; then
    export PYTHONPATH="$extra${PYTHONPATH:+:$PYTHONPATH}"
fi
exec "${DOCTOR_PYTHON:-python3}" -m dsv4_doctor "$@"
