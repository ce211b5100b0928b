"""The settings probe's answer (its entry, dsv4probe_settings.py, says what each stage runs): the job's config composed
(dsv4probe_hydra_compose), validated and built by the stack's own code, or a Megatron-LM command parsed by
Megatron's; the settings the doctor reads, each stage's outcome and any exception as data. Stdlib only at import; the
target's stack only inside answer. Loaded by path (dsv4probe_common.load_module).
"""

import os
import sys

# Before any import of the target's: never the network, never the model's own code.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.pop("TRUST_REMOTE_CODE", None)

# In sys.modules: loaded by path by the launcher (dsv4probe_launch.py), never looked up on sys.path.
from dsv4probe_common import LIB, cut_text, installed_version, load_module, stage

HERE = os.path.dirname(os.path.realpath(__file__))

load_module("dsv4probe_settings_inputs", HERE)
load_module("dsv4probe_settings_direct", HERE)
from dsv4probe_settings_inputs import GpuFacts, NotBuilt, local_model  # noqa: E402
from dsv4probe_settings_direct import build_direct  # noqa: E402

import time
import traceback

MAX_MESSAGE = 1500
STACK_PACKAGES = ("megatron", "verl", "transformers", "omegaconf", "hydra", "torch", "transformer_engine")
ROLE_HEADS = {"actor": "actor_rollout_ref.actor", "ref": "actor_rollout_ref.ref", "critic": "critic"}
SETTINGS = ("context_parallel_size", "cp_partition_mode", "dsa_kernel_backend", "apply_dsa_kernel_fusion",
            "tensor_model_parallel_size", "pipeline_model_parallel_size", "expert_model_parallel_size",
            "expert_tensor_parallel_size", "virtual_pipeline_model_parallel_size", "sequence_parallel",
            "sequence_packing_scheduler", "max_seqlen_per_dp_cp_rank", "dynamic_context_parallel",
            "apply_rope_fusion", "mtp_num_layers", "experimental_attention_variant", "multi_latent_attention",
            "dsa_indexer_loss_coeff", "dsa_indexer_use_sparse_loss", "moe_token_dispatcher_type",
            "moe_flex_dispatcher_backend", "num_layers")


def _package_path(filename):
    """(the file's path from its stack package's folder, "megatron/core/x.py"), or None outside the stack."""
    parts = filename.replace("\\", "/").split("/")
    for i in range(len(parts) - 2, -1, -1):
        if parts[i] in STACK_PACKAGES:
            return "/".join(parts[i:])
    return None


def _root_cause(exc):
    """The exception the stack raised first: Hydra's instantiate wraps a config class's own error."""
    seen = 0
    while seen < 8:
        inner = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
        if inner is None:
            break
        exc, seen = inner, seen + 1
    return exc


def raised(exc, stage_name):
    """An exception as the answer gives it: type, message (bounded), and the deepest frame inside the stack's
    packages (file from its package's folder, line). An error Hydra's instantiate wraps is given as raised
    (the wrapper's type beside it)."""
    root = _root_cause(exc)
    try:
        message = cut_text(str(root), MAX_MESSAGE)
    except BaseException:
        message = "<unprintable %s>" % type(root).__name__
    out = {"type": type(root).__name__, "message": message, "file": None, "line": None, "stage": stage_name}
    if root is not exc:
        out["wrapped_by"] = type(exc).__name__
    for candidate in (root, exc):
        for frame in reversed(traceback.extract_tb(candidate.__traceback__)):
            where = _package_path(frame.filename)
            if where is not None:
                out["file"], out["line"] = where, frame.lineno
                return out
    return out


def plain(value, depth=0):
    """A setting as JSON carries it: numbers, text, lists, an enum by its name."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return value[:200]
    if depth < 2 and isinstance(value, (list, tuple)):
        return [plain(v, depth + 1) for v in list(value)[:64]]
    name = getattr(value, "name", None)
    return name[:200] if isinstance(name, str) else str(value)[:200]


def settings_of(config):
    return dict((name, plain(getattr(config, name))) for name in SETTINGS if hasattr(config, name))


def _version(distribution):
    return installed_version(distribution)


# --------------------------------------------------------------------------------------------- verl jobs


def compose(request):
    hydra_probe = load_module("dsv4probe_hydra_compose", LIB)
    entry_file = request.get("entry_file")
    deco_path, deco_name = hydra_probe.decorator_config(entry_file)
    config_path = request.get("config_path") or deco_path
    config_name = request.get("config_name") or deco_name
    if config_name is None or config_path is None:
        raise NotBuilt("the entry module has no @hydra.main(config_path=..., config_name=...) the doctor reads")
    if str(config_name).endswith(".yaml"):
        config_name = str(config_name)[:-5]
    base = os.path.dirname(os.path.realpath(entry_file))
    folder = config_path if os.path.isabs(config_path) else os.path.normpath(os.path.join(base, config_path))
    words = request.get("words") if isinstance(request.get("words"), dict) else {}
    for name in words.get("env_unset") or ():
        os.environ.pop(name, None)
    os.environ.update(dict((str(k), str(v)) for k, v in (words.get("env_set") or {}).items()))
    return hydra_probe.compose_config(folder, config_name, [str(w) for w in words.get("overrides") or ()],
                                      request.get("extra_config_dir"))


def verl_roles(cfg, out):
    """verl's validation: validate_config as main_ppo runs it, then each built role's McoreEngineConfig. The roles
    verl builds (ref with a KL term, critic when needed), {role: engine config}."""
    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass, validate_config
    from verl.workers.config import McoreEngineConfig

    roles = ["actor"]
    try:
        from verl.trainer.ppo.utils import need_critic, need_reference_policy
    except BaseException as exc:  # its module imports verl's datasets and workers: said, the roles as configured
        out["stages"]["verl.validate_config"] = {"status": "not run", "why": "verl.trainer.ppo.utils does not "
                                                 "import here (%s: %s)" % (type(exc).__name__, cut_text(str(exc), 200))}
        use_ref = bool(OmegaConf.select(cfg, "actor_rollout_ref.actor.use_kl_loss", default=False) or
                       OmegaConf.select(cfg, "algorithm.use_kl_in_reward", default=False))
        use_critic = OmegaConf.select(cfg, "critic.enable", default=None) is True
    else:
        use_ref, use_critic = bool(need_reference_policy(cfg)), bool(need_critic(cfg))
        try:
            validate_config(config=cfg, use_reference_policy=use_ref, use_critic=use_critic)
        except BaseException as exc:
            raise Raised(raised(exc, "verl.validate_config"))
        out["stages"]["verl.validate_config"] = {"status": "ok"}
    roles += (["ref"] if use_ref else []) + (["critic"] if use_critic else [])
    engines = {}
    for role in roles:
        head = ROLE_HEADS[role]
        if OmegaConf.select(cfg, head + ".strategy", default="megatron") != "megatron":
            continue
        node = OmegaConf.select(cfg, head + ".megatron", default=None)
        if node is None:
            continue
        try:
            if role == "actor":  # as verl's worker builds it: the actor's config, its engine config inside
                engines[role] = omega_conf_to_dataclass(OmegaConf.select(cfg, head)).engine
            else:  # the role's engine config by its _target_, as verl instantiates it inside the role's
                engines[role] = omega_conf_to_dataclass(node)
        except BaseException as exc:
            raise Raised(raised(exc, "verl's %s config (%s)" % ("actor" if role == "actor" else "engine", role)))
        if not isinstance(engines[role], McoreEngineConfig):
            del engines[role]
    out["stages"]["verl.McoreEngineConfig"] = {"status": "ok", "roles": sorted(engines)}
    return engines


class Raised(Exception):
    def __init__(self, info):
        Exception.__init__(self, info.get("message"))
        self.info = info


def build_with_verl(cfg, role, engine, folder, facts):
    """verl's own _build_tf_config on a stand-in engine; the provider as Megatron-Bridge finalized it."""
    import types

    from omegaconf import OmegaConf
    from transformers import AutoConfig
    from verl.workers.engine.megatron.transformer_impl import MegatronEngine

    head = "critic" if role == "critic" else "actor_rollout_ref"
    hf_config = AutoConfig.from_pretrained(folder, trust_remote_code=False)
    mtp_enable = bool(OmegaConf.select(cfg, head + ".model.mtp.enable", default=False))
    model_config = types.SimpleNamespace(
        hf_config=hf_config, local_path=folder, trust_remote_code=False, mtp=types.SimpleNamespace(enable=mtp_enable),
        model_type="value_model" if role == "critic" else "language_model",
        share_embeddings_and_output_weights=bool(getattr(hf_config, "tie_word_embeddings", False)))
    engine_stand_in = types.SimpleNamespace(model_config=model_config, engine_config=engine,
                                            enable_routing_replay=False, _qat_enabled=False)
    # The stand-in engine is no MegatronEngine: its own methods are called unbound on it.
    try:
        MegatronEngine._build_tf_config(engine_stand_in)
    except BaseException:
        provider = getattr(engine_stand_in, "provider", None)
        if provider is None or not getattr(provider, "_finalized", True):
            raise
        # Past the config (verl's PEFT lookup after it): the built provider stands.
    return engine_stand_in.provider


def build_verl(request, out, facts):
    stage("compose the verl config")
    try:
        cfg = compose(request)
    except NotBuilt:
        raise
    except BaseException as exc:  # job.config reports Hydra's own error: the config is not built
        raise NotBuilt("Hydra does not compose the command (%s; see job.config)" % type(exc).__name__)
    out["stages"]["compose"] = {"status": "ok"}
    stage("verl's validation")
    try:
        import verl

        out["versions"]["verl"] = getattr(verl, "__version__", None) or _version("verl")
    except BaseException as exc:
        raise NotBuilt("verl does not import here (%s: %s)" % (type(exc).__name__, cut_text(str(exc), 300)))
    engines = verl_roles(cfg, out)
    if not engines:
        raise NotBuilt("no role of the job uses verl's Megatron engine")
    from omegaconf import OmegaConf

    stage("the model's config")
    model_path = OmegaConf.select(cfg, "actor_rollout_ref.model.path", default=None)
    folder, hf, how = local_model(model_path)
    out["model"] = {"found": how, "model_type": str(hf.get("model_type"))[:80]}
    out["stages"]["model"] = {"status": "ok"}
    stage("the GPU facts")
    facts.apply()
    out["gpu"] = facts.describe()
    mode, why_direct = "verl", None
    try:
        import megatron.bridge  # noqa: F401
        import verl.workers.engine.megatron.transformer_impl  # noqa: F401
    except BaseException as exc:
        mode, why_direct = "direct", "%s: %s" % (type(exc).__name__, cut_text(str(exc), 300))
    out["mode"] = mode
    if why_direct:
        out["why_direct"] = why_direct
    out["versions"].update(megatron_core=_megatron_core_version(), megatron_bridge=_version("megatron-bridge"))
    decision = None
    if mode == "direct":
        decision = request.get("bridge_decision")
        if not isinstance(decision, bool):
            # Megatron-Bridge 0.6.x's rule (deepseek_v4_bridge.py L105-122, L393-394), supplied: its provider does
            # not run here.
            decision = bool(facts.cc[0] >= 10 and facts.imports)
        out["bridge_decision"] = decision
    out["roles"] = {}
    for role, engine in sorted(engines.items()):
        stage("building the Megatron config (%s)" % role)
        try:
            if mode == "verl":
                config, ignored = build_with_verl(cfg, role, engine, folder, facts), []
            else:
                config, ignored = build_direct(cfg, role, engine, hf, facts, decision)
        except BaseException as exc:
            raise Raised(raised(exc, "build (%s)" % role))
        out["roles"][role] = {"settings": settings_of(config), "class": type(config).__name__}
        if ignored:
            out["roles"][role]["not_fields"] = ignored
    out["stages"]["build"] = {"status": "ok"}


def _megatron_core_version():
    try:
        from megatron.core import package_info

        return str(package_info.__version__)
    except BaseException:
        return None


# ------------------------------------------------------------------------------------ Megatron-LM commands


def build_megatron(request, out, facts):
    stage("Megatron's argument validation")
    argv = [str(w) for w in request.get("argv") or ()]
    try:
        from megatron.training.arguments import core_transformer_config_from_args, parse_args, validate_args
    except BaseException as exc:
        raise NotBuilt("megatron.training does not import here (%s: %s)" % (type(exc).__name__,
                                                                           cut_text(str(exc), 300)))
    facts.apply()
    out["gpu"] = facts.describe()
    world = request.get("world_size")
    os.environ.setdefault("WORLD_SIZE", str(world if isinstance(world, int) and world > 0 else 1))
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("LOCAL_RANK", "0")
    saved = sys.argv
    sys.argv = [str(request.get("entry") or "pretrain_gpt.py")] + argv
    try:
        args = parse_args()
        validate_args(args, {})
        config = core_transformer_config_from_args(args)
    except SystemExit as exc:
        raise Raised({"type": "SystemExit", "message": "Megatron's argument parser exits (%s)" % exc, "file": None,
                      "line": None, "stage": "megatron.parse_args"})
    except BaseException as exc:
        raise Raised(raised(exc, "megatron.validate_args"))
    finally:
        sys.argv = saved
    out["mode"] = "megatron"
    out["versions"]["megatron_core"] = _megatron_core_version()
    out["roles"] = {"model": {"settings": settings_of(config), "class": type(config).__name__}}
    out["stages"]["build"] = {"status": "ok"}


MAX_BATCH = 64


def answer(request):
    """One job's answer; a request {"batch": [request, ...]} answers each in turn in this one process (the tests
    batch their cases so: the stack's imports are paid once), every supplied fact undone between them."""
    if isinstance(request.get("batch"), list):
        return {"batch": [answer_one(r if isinstance(r, dict) else {}) for r in request["batch"][:MAX_BATCH]]}
    return answer_one(request)


def answer_one(request):
    started = time.monotonic()
    out = {"status": None, "stages": {}, "versions": {}}
    facts = GpuFacts(request)
    try:
        if request.get("kind") == "megatron":
            build_megatron(request, out, facts)
        else:
            build_verl(request, out, facts)
        out["status"] = "built"
    except NotBuilt as exc:
        out.update(status="not built", why=cut_text(str(exc), MAX_MESSAGE))
    except Raised as exc:
        out.update(status="raised", error=exc.info)
    except BaseException as exc:  # whatever else the stack raised on the way: an answer, never a crash
        out.update(status="raised", error=raised(exc, "probe"))
    finally:
        for undo in reversed(facts.undo):
            try:
                undo()
            except BaseException:
                pass
    out["wall_s"] = round(time.monotonic() - started, 3)
    return out

