"""The composition probe: compose a verl job's config as its entry module's `@hydra.main` would, in the target.

Stdlib only at import; it imports hydra and omegaconf (and nothing of verl) only inside `answer`. The entry module's
`config_path`/`config_name` are read from its source with ast (never imported); the command's `--config-path`/
`--config-name` win, as in Hydra. `initialize_config_dir` on that folder (verl's installed `verl/trainer/config`
by default), then `compose(config_name, overrides)` with the overrides exactly as given. Nothing is instantiated and
nothing is resolved but the settings asked for (`OmegaConf.select` resolves one node), so an interpolation or a
resolver elsewhere in the tree cannot fail the job here. Each setting: its value and type as the job gets it, and
where it came from (an override, a config file the command names, verl's default).
"""

import os

# In sys.modules: loaded by path by the launcher (dsv4probe_launch.py), never looked up on sys.path.
from dsv4probe_common import load_module, serve

HERE = os.path.dirname(os.path.realpath(__file__))

if __name__ == "__main__":
    serve(load_module("dsv4probe_hydra_compose", HERE).answer)
