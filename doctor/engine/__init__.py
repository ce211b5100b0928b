"""The engine: the check registry and its entry points (registry.py), the plugin hosts (plugins.py, pluginhost.py),
the probe runner (probes.py), the runner that runs checks concurrently under one deadline (runner.py), the target
interpreter (target.py) and one run from start to report (earlystart.py, session.py, runreport.py). It may import
model/, hostio/, upstream/, job/, fix/, kernels/ and report/; never checks/, commands/ or cli/."""
