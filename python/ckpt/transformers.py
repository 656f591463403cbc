"""transformers' from_pretrained, with the weights read by ckpt.

    import ckpt.transformers
    model = ckpt.transformers.AutoModelForCausalLM.from_pretrained("llama/", dtype="auto")
    model = ckpt.transformers.from_pretrained("org/repo", revision="main")   # the class config.json names

The model is built on the meta device as transformers builds it, and its
weights are put in place by ckpt.load_into(model, path, assign=True):
copy-on-write views of the file where no cast is needed, the engine's casts
otherwise, so that no second copy of the model is ever held.  Everything
around the weights is transformers' own code, called as from_pretrained
calls it: the config, the file a name resolves to (a local directory, or
a Hub repo with the same revision, token, cache, subfolder and variant
arguments), the dtype ("auto", a dtype, keep_in_fp32 modules), the
key renames and conversions of the architecture, the base model prefix
added or stripped, missing weights initialised and tied weights tied, the
generation config, model.eval().  The model's state dict and logits equal
from_pretrained's (tests/python/test_transformers.py).

The weights of a Hub repo are read by ckpt itself: its hf:// source
streams each file once from the Hub into the Hub's own cache, checking
its SHA-256 on the way, and into the model in the same pass, each tensor
as its bytes arrive (_hub_weights); offline,
transformers' resolver finds the files in that cache and ckpt reads them.

Every `Auto*` class of transformers, and every model class, is here under
its own name with a `from_pretrained` of the same signature.  The options
whose work is not the reading of weights (`quantization_config`,
`device_map="auto"` and its peers, `max_memory`, `offload_folder`,
`state_dict`) go to transformers' own from_pretrained unchanged: ckpt
reads plain safetensors and torch checkpoints into a model, and
transformers keeps the rest.  A llama.cpp GGUF (`gguf_file=`) of a family
the library maps back to Hugging Face (llama, qwen2, qwen3, phi3, gemma2,
gemma3; Mixtral, Qwen2-MoE and Qwen3-MoE's experts) is read by ckpt
through that mapping (load_into(..., as_hf="joined"): names, Q/K rows put
back, Gemma's norms less 1, each expert's rows read into its place in the
model's stacked experts, dequantized by the engine into the meta model), its config
being transformers' parsing of the key-values, or ckpt's (the config.json
`ckpt convert model.gguf dir/` writes) for a model transformers' GGUF
loader does not know (a Mixtral, which it parses as a Llama without its
experts) or whose experts' widths its parsing drops (Qwen2-MoE, Qwen3-MoE:
_gguf_config); another GGUF goes to transformers' own loader.  With `tp_plan`/`tp_size`/
`distributed_config` (under torchrun) transformers shards the model and
its loader cuts each rank's part out of ckpt's lazy tensors."""
import copy
import json
import os

import torch
import transformers
from transformers import AutoConfig, PreTrainedConfig, PreTrainedModel

from . import _api, _dtypes

__all__ = ["from_pretrained", "load_pretrained"]

# Options that change what is done with the weights beyond reading them into
# the model (quantizing, placing them by memory, offloading them, sharding
# them across processes): transformers does those.  A llama.cpp GGUF
# (gguf_file=) is read by ckpt where its GGUF → Hugging Face mapping takes
# it (_gguf_names), else by transformers.
_TRANSFORMERS_ONLY = ("quantization_config", "max_memory", "offload_folder", "offload_buffers",
                      "device_mesh", "state_dict", "use_kernels", "kernel_config", "fusion_config", "adapter_name",
                      "adapter_kwargs")
# Parallelism (tensor, pipeline, expert, FSDP): transformers shards the
# model as it does in from_pretrained, and its loader cuts each rank's part
# out of the tensors that ckpt serves (_load_distributed).
_DISTRIBUTED = ("tp_plan", "tp_size", "distributed_config")
_PLACED_BY_TRANSFORMERS = ("auto", "balanced", "balanced_low_0", "sequential")
_HUB_KWARGS = ("cache_dir", "force_download", "local_files_only", "proxies", "revision", "subfolder", "token")


def _transformers_does_it(kwargs):
    """True when an option asks for work on the weights that transformers
    does (see _TRANSFORMERS_ONLY) or a device map it computes."""
    if any(kwargs.get(k) is not None and kwargs.get(k) is not False for k in _TRANSFORMERS_ONLY):
        return True
    device_map = kwargs.get("device_map")
    return isinstance(device_map, str) and device_map in _PLACED_BY_TRANSFORMERS


def _modeling():
    from transformers import modeling_utils
    return modeling_utils


def _resolve_revision(path, hub):
    """The revision a load reads, as transformers' from_pretrained resolves
    it (a branch or tag pinned to its commit, so that every file of one
    load comes from one state of the repository).  Transformers before
    5.23 has no resolve_revision and reads the revision as given."""
    resolve = getattr(_modeling(), "resolve_revision", None)
    if resolve is None:
        return hub.get("revision")
    return resolve(path, hub.get("revision"), token=hub.get("token"),
                   local_files_only=hub.get("local_files_only", False), cache_dir=hub.get("cache_dir"))


def _checkpoint_path(files, sharded_metadata):
    """The one path ckpt opens for what transformers resolved: the file
    itself, or the index beside a set of shards (transformers' index names
    the shards it listed)."""
    if sharded_metadata is None:
        if len(files) != 1:
            raise ValueError(f"expected one checkpoint file, got {files}")
        return files[0]
    folder = os.path.dirname(files[0])
    wanted = set(os.path.basename(f) for f in files)
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".index.json"):
            continue
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            try:
                shards = set(json.load(f).get("weight_map", {}).values())
            except ValueError:
                continue
        if shards == wanted:
            return os.path.join(folder, name)
    raise FileNotFoundError(f"no index in {folder} lists the shards {sorted(wanted)}")


def _hub_weights(name, hub, variant, use_safetensors):
    """For a repo id of the Hub: (hf://ORG/NAME@COMMIT/[SUBFOLDER/]FILE of
    its weights, the source options that read it, transformers' sharded
    metadata or None), the file chosen as transformers chooses it
    (safetensors, then its index, then pytorch_model.bin, then its index;
    the variant's names; use_safetensors), so that ckpt's hf:// source
    reads the weights once from the Hub into the Hub's cache, checking each
    file's SHA-256 as it streams.  None where transformers resolves the
    files itself: a local path, offline (local_files_only, HF_HUB_OFFLINE:
    from its cache, which ckpt then reads from disk), force_download,
    proxies, token=False, a repo it cannot list (its own error then says
    why: gated, private, missing) or one without such a file (its error,
    or its safetensors conversion)."""
    if not isinstance(name, str) or os.path.exists(name) or name.count("/") > 1:
        return None
    if hub.get("local_files_only") or hub.get("force_download") or hub.get("proxies") or hub.get("token") is False:
        return None
    import huggingface_hub
    from transformers.utils import SAFE_WEIGHTS_INDEX_NAME, SAFE_WEIGHTS_NAME, WEIGHTS_INDEX_NAME, WEIGHTS_NAME
    token = hub.get("token")
    try:
        info = huggingface_hub.HfApi().model_info(name, revision=hub.get("revision"), token=token)
    except Exception:  # noqa: BLE001 - transformers' resolution then raises its own, helpful error
        return None
    folder = (hub.get("subfolder") or "").strip("/")
    listed = {s.rfilename for s in info.siblings or ()}
    candidates = []
    if use_safetensors is not False:
        candidates += [SAFE_WEIGHTS_NAME, SAFE_WEIGHTS_INDEX_NAME]
    if not use_safetensors:
        candidates += [WEIGHTS_NAME, WEIGHTS_INDEX_NAME]
    found = next((f for f in (_modeling()._add_variant(c, variant) for c in candidates)
                  if (folder + "/" + f if folder else f) in listed), None)
    if found is None or not info.sha:
        return None
    source = {"bearer_token": token} if isinstance(token, str) else {}
    if hub.get("cache_dir") is not None:
        source["hf_cache"] = hub["cache_dir"]
    path = f"hf://{name}@{info.sha}/" + (folder + "/" if folder else "") + found
    sharded_metadata = None
    if found.endswith(".index.json"):
        from transformers.utils.hub import cached_file
        index_file = cached_file(name, found, **{**hub, "revision": info.sha})  # a small JSON, transformers' own
        with open(index_file, encoding="utf-8") as f:
            index = json.load(f)
        sharded_metadata = dict(index.get("metadata") or {}, all_checkpoint_keys=list(index["weight_map"]),
                                weight_map=dict(index["weight_map"]))
    return path, source, sharded_metadata


def _key_plan(model, names, weight_mapping):
    """Where each checkpoint name goes, as transformers' loader decides
    (its renamings, then at most one converter, then the base model prefix
    added or stripped): ({source: target} for renamed names, {source:
    (target, converter pattern)} for names a converter combines or splits)."""
    from transformers.core_model_loading import WeightConverter, WeightRenaming, rename_source_key
    renamings = [m for m in weight_mapping if isinstance(m, WeightRenaming)]
    converters = [m for m in weight_mapping if isinstance(m, WeightConverter)]
    meta = model.state_dict()
    prefix = model.base_model_prefix
    renames, converted = {}, {}
    for name in names:
        target, pattern = rename_source_key(name, renamings, converters, prefix, meta)
        if target not in meta and name in meta:
            target, pattern = rename_source_key(name, [], [], base_model_prefix=prefix, meta_state_dict=meta)
        if pattern is not None:
            converted[name] = (target, pattern)
        elif target != name:
            renames[name] = target
    return renames, converted


def _rename_rules(renames):
    """ckpt plan renames for {source: target}: exact names (a rule without
    `*` matches the name itself); through a temporary name when a target
    is also another tensor's source, so that no rule renames twice."""
    if not set(renames.values()) & set(renames):
        return [(_api._literal(a), b) for a, b in renames.items()]
    rules, second = [], []
    for i, (a, b) in enumerate(renames.items()):
        rules.append((_api._literal(a), f"ckpt-rename-{i}"))
        second.append((f"ckpt-rename-{i}", b))
    return rules + second


def _target_dtypes(model, dtype_plan):
    """{model name: dtype} each loaded tensor takes, as transformers' loader
    casts it: the dtype plan's (keep_in_fp32 modules), else the empty
    parameter's own."""
    import re
    plan = [(re.compile(p), d) for p, d in dtype_plan.items()] if dtype_plan else []
    out = {}
    for name, t in model.state_dict().items():
        d = next((d for p, d in plan if p.search(name)), t.dtype)
        out[name] = d
    return out


def _cast_rule(catalog_dtypes, renames, targets):
    """load_into's dtype= for the float tensors whose dtype changes: one
    dtype when they all go to one, else {exact name: dtype}."""
    want = {}
    for src, src_dtype in catalog_dtypes.items():
        name = renames.get(src, src)
        d = targets.get(name)
        if d is None or not d.is_floating_point:
            continue
        if _api.dtype_name(d) != src_dtype:
            want[name] = d
    if not want:
        return None
    floats = {d for d in targets.values() if d.is_floating_point}
    if len(floats) == 1:
        return floats.pop()
    return {_api._literal(n): d for n, d in want.items()}


def _device_map(device_map):
    """from_pretrained's device_map as a dict (a device, a device name or
    a GPU ordinal: {"": it}); a dict maps module prefixes to devices.  No
    accelerate needed: ckpt puts each tensor on its device."""
    if device_map is None or isinstance(device_map, dict):
        return device_map
    if isinstance(device_map, (int, str, torch.device)):
        return {"": device_map}
    raise ValueError(f"device_map is a device, a device name, a GPU ordinal or a dict of module prefixes to devices, "
                     f"not {device_map!r}")


def _device_of(device_map):
    """The one device of a device map (None: the CPU), or None when it
    names several."""
    if device_map is None:
        return "cpu"
    devices = {str(torch.device(d) if not isinstance(d, str) or d not in ("disk",) else d)
               for d in device_map.values()}
    return devices.pop() if len(devices) == 1 else None


def _place(model, device_map):
    """Moves each parameter and buffer to the device its module prefix
    maps to (transformers' get_device: the longest matching prefix)."""
    from transformers.integrations.accelerate import get_device
    moved = {}  # tied names share one tensor, and go on sharing one
    for name, t in list(model.state_dict(keep_vars=True).items()) + list(model.named_buffers()):
        if id(t) not in moved:
            dev = torch.device(get_device(device_map, name, valid_torch_device=True))
            new = t
            if t.device != dev:
                new = t.to(dev)
                if isinstance(t, torch.nn.Parameter):
                    new = type(t)(new, requires_grad=t.requires_grad)
                    new.__dict__.update(t.__dict__)
            moved[id(t)] = new
        if moved[id(t)] is not t:
            prefix, _, attr = name.rpartition(".")
            setattr(model.get_submodule(prefix), attr, moved[id(t)])


def load_pretrained(model_class, pretrained_model_name_or_path, *model_args, **kwargs):
    """`model_class.from_pretrained(pretrained_model_name_or_path, ...)`
    with the weights read by ckpt; see the module's documentation."""
    if _transformers_does_it(kwargs):
        return model_class.from_pretrained(pretrained_model_name_or_path, *model_args, **kwargs)
    given = dict(kwargs)  # for transformers' own from_pretrained, where it reads a GGUF itself
    gguf_file = kwargs.pop("gguf_file", None)
    mu = _modeling()
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.utils import ContextManagers

    config = kwargs.pop("config", None)
    hub = {"cache_dir": None, "force_download": False, "proxies": None, "local_files_only": False, "token": None,
           "revision": "main", "subfolder": ""}  # from_pretrained's defaults, all passed on as it passes them
    hub.update((k, kwargs.pop(k)) for k in _HUB_KWARGS if k in kwargs)
    ignore_mismatched_sizes = kwargs.pop("ignore_mismatched_sizes", False)
    use_safetensors = kwargs.pop("use_safetensors", None)
    kwargs.pop("weights_only", None)  # ckpt never runs a pickle: a torch file's globals are checked, not called
    kwargs.pop("disable_mmap", None)
    output_loading_info = kwargs.pop("output_loading_info", False)
    generation_config = kwargs.pop("generation_config", None)
    variant = kwargs.pop("variant", None)
    device_map = kwargs.pop("device_map", None)
    key_mapping = kwargs.pop("key_mapping", None)
    trust_remote_code = kwargs.pop("trust_remote_code", None)
    from_pipeline = kwargs.pop("_from_pipeline", None)
    from_auto_class = kwargs.pop("_from_auto", False)
    kwargs.pop("adapter_kwargs", None)
    torch_dtype = kwargs.pop("torch_dtype", None)
    dtype = kwargs.pop("dtype", None)
    dtype = dtype if dtype is not None else torch_dtype
    dtype = "auto" if dtype is None else dtype
    if mu.is_offline_mode() and not hub.get("local_files_only"):
        hub["local_files_only"] = True
    hub["revision"] = _resolve_revision(pretrained_model_name_or_path, hub)
    distributed, device_map, mesh = _distributed(model_class, kwargs, device_map)
    device_map = _device_map(device_map)

    ours = None
    if config is None and gguf_file:  # a GGUF's config: ckpt's where transformers' parsing knows no such model
        ours = _gguf_config(pretrained_model_name_or_path, gguf_file, hub, model_class.config_class, kwargs)
    if ours is not None:
        config, model_kwargs = ours
    elif not isinstance(config, PreTrainedConfig):
        config, model_kwargs = model_class.config_class.from_pretrained(
            config if config is not None else pretrained_model_name_or_path, return_unused_kwargs=True,
            gguf_file=gguf_file, _from_auto=from_auto_class, _from_pipeline=from_pipeline, **hub, **kwargs)
        model_kwargs.pop("gguf_file", None)  # a GGUF's config: transformers' own parsing of its key-values
    else:
        config = copy.deepcopy(config)
        model_kwargs = kwargs
    if "attn_implementation" in kwargs:
        config._attn_implementation = kwargs.pop("attn_implementation")
        model_kwargs.pop("attn_implementation", None)
    if "experts_implementation" in kwargs:
        config._experts_implementation = kwargs.pop("experts_implementation")
        model_kwargs.pop("experts_implementation", None)

    user_agent = {"file_type": "model", "framework": "pytorch", "from_auto_class": from_auto_class}
    from_hub = None
    if gguf_file is None and distributed is None and getattr(config, "transformers_weights", None) is None:
        from_hub = _hub_weights(pretrained_model_name_or_path, hub, variant, use_safetensors)
    if from_hub is not None:  # read from the Hub by ckpt itself, into the Hub's cache
        path, source, sharded_metadata = from_hub
        files = [path]
    else:  # a local directory, or what transformers resolves and downloads
        source = {}
        files, sharded_metadata = mu._get_resolved_checkpoint_files(
            pretrained_model_name_or_path=pretrained_model_name_or_path, variant=variant, gguf_file=gguf_file,
            use_safetensors=use_safetensors, download_kwargs=hub, user_agent=user_agent,
            is_remote_code=model_class.is_remote_code(),
            transformers_explicit_filename=getattr(config, "transformers_weights", None))
        path = _checkpoint_path(files, sharded_metadata)
    hf_quantizer = gguf_names = None
    if gguf_file:
        from transformers.quantizers.auto import get_hf_quantizer
        # transformers' marker of a GGUF load (its dtype rule, the model's
        # quantization attributes), as from_pretrained makes it
        hf_quantizer, config, device_map = get_hf_quantizer(config, None, device_map, True, user_agent,
                                                            gguf_file=gguf_file)
        hf_quantizer.read_header(path)
        gguf_names = None if hf_quantizer.supported or distributed is not None else _gguf_names(path)
        if gguf_names is None:  # transformers' own GGUF path (blocks kept packed), or a GGUF ckpt does not map
            return model_class.from_pretrained(pretrained_model_name_or_path, *model_args, **given)

    catalog_dtypes = None
    if gguf_names is not None:
        catalog_dtypes = {n: dt for n, (dt, _) in gguf_names.items()}
    elif distributed is None:
        with _api.open(path, **source) as c:
            catalog_dtypes = {n: t.dtype for n, t in c.tensors.items()}
    # the weights' dtype for dtype="auto" without one in the config, as
    # transformers takes it from the first file's tensors: here from the
    # catalog (a Hub file is not on disk yet)
    weights = {n: torch.empty(0, dtype=_dtypes.torch_dtype(d), device="meta")
               for n, d in catalog_dtypes.items()} if from_hub is not None else None
    config, dtype = mu._get_dtype(dtype, files, config, sharded_metadata, weights, True, hf_quantizer)
    config.name_or_path = pretrained_model_name_or_path
    if distributed is not None:
        config.distributed_config = distributed
    config = copy.deepcopy(config)
    with ContextManagers(model_class.get_init_context(dtype, hf_quantizer is not None, False, False)):
        model = model_class(config, *model_args, **model_kwargs)
        mu.patch_output_recorders(model)
        if hf_quantizer is not None:
            hf_quantizer.preprocess_model(model=model, dtype=dtype, device_map=device_map, checkpoint_files=files,
                                          use_kernels=False)
    dtype_plan = model._get_dtype_plan(dtype)
    weight_mapping = get_model_conversion_mapping(model, key_mapping, hf_quantizer)
    if distributed is not None:
        model = model_class.maybe_distribute_model(model, distributed, mesh)
    load_config = mu.LoadStateDictConfig(
        pretrained_model_name_or_path=pretrained_model_name_or_path, ignore_mismatched_sizes=ignore_mismatched_sizes,
        sharded_metadata=sharded_metadata, device_map=device_map, dtype=dtype, dtype_plan=dtype_plan,
        weight_mapping=weight_mapping, use_safetensors=use_safetensors, download_kwargs=hub, hf_quantizer=hf_quantizer,
        device_mesh=mesh.get_mesh(("pp", "fsdp", "tp")) if mesh is not None else None)

    if distributed is not None:
        info = _load_distributed(model_class, model, path, load_config)
    else:
        renames, converted = _key_plan(model, list(catalog_dtypes), weight_mapping)
        info = _load(model, path, renames, converted, catalog_dtypes, dtype_plan, device_map, load_config,
                     gguf_names, source)
    used = {id(m) for m in getattr(model, "_weight_conversions", None) or []}
    model._weight_conversions = [m for m in weight_mapping if id(m) in used or m.was_used()]
    info = model_class._finalize_model_loading(model, load_config, info)
    model.eval()
    model.set_use_kernels(False, None)
    if model.can_generate() and hasattr(model, "adjust_generation_fn") and not gguf_file:
        model.adjust_generation_fn(generation_config, from_auto_class, from_pipeline, pretrained_model_name_or_path,
                                   **hub, trust_remote_code=trust_remote_code, **kwargs)
    if device_map is not None and len(set(device_map.values())) > 1:
        mu.accelerate_dispatch(model, hf_quantizer, device_map, None, None, False)
    if hf_quantizer is not None:
        model.hf_quantizer = hf_quantizer
        hf_quantizer.postprocess_model(model)
    if output_loading_info:
        return model, info.to_dict()
    return model


def _distributed(model_class, kwargs, device_map):
    """from_pretrained's parallelism options (`distributed_config`, or the
    older `tp_plan`/`tp_size`), prepared as from_pretrained prepares them:
    (DistributedConfig or None, the device map it implies, the mesh
    manager or None).  The process group must be initialised (torchrun)."""
    tp_plan, tp_size = kwargs.pop("tp_plan", None), kwargs.pop("tp_size", None)
    config = kwargs.pop("distributed_config", None)
    if config is None and tp_plan is None and tp_size is None:
        return None, device_map, None
    if config is not None and (tp_plan is not None or tp_size is not None):
        raise ValueError("Pass either `distributed_config` or the standalone `tp_plan`/`tp_size` arguments, not "
                         "both. Set tensor-parallel options on `DistributedConfig` when using it.")
    if config is None:
        from transformers.distributed import DistributedConfig
        config = DistributedConfig(tp_plan=tp_plan, tp_size=tp_size)
    return model_class.prepare_distribute_model(config, device_map=device_map)


def _load_distributed(model_class, model, path, load_config):
    """Reads a sharded (tensor-, pipeline-, expert- or FSDP-parallel) model:
    transformers' own loader, which places each rank's part, fed with
    ckpt's lazy tensors (safe_open's get_slice over any format ckpt
    reads), so that a rank reads the rows it keeps and no pickle runs."""
    from ._safe import safe_open
    with safe_open(path, "pt") as f:
        state = {name: f.get_slice(name) for name in f.keys()}
        info, _ = model_class._load_pretrained_model(model, state, None, load_config)
    return info


# The config's widths that shape tensors and that a config class may hold
# with a default of its own instead of deriving it from the others: the
# attention heads' (from the GGUF's attention.key_length) and a mixture of
# experts' (expert_feed_forward_length, expert_shared_feed_forward_length).
_SHAPE_WIDTHS = ("head_dim", "moe_intermediate_size", "shared_expert_intermediate_size")


def _dropped(ours, given=()):
    """The widths in ckpt's config `ours` that transformers' config of the
    same GGUF would get wrong: its parsing (GGUF_TO_TRANSFORMERS_MAPPING)
    never sets them, the caller did not give them (`given`: from_pretrained's
    keywords), and the config class's default or derivation differs from
    the file's.  transformers 5.23 maps none of Qwen2-MoE's and Qwen3-MoE's
    experts' widths (it builds 1408- or 768-wide experts and a 5632-wide
    shared expert whatever the file holds) nor Qwen3's
    qwen3.attention.key_length (Qwen3Config keeps head_dim=128; Llama's
    config derives hidden_size / heads, right for a Llama GGUF), and the
    tensors do not fit such a model.  A transformers that parses them gets
    its own config back."""
    from transformers import AutoConfig
    from transformers.modeling_gguf_pytorch_utils import GGUF_TO_TRANSFORMERS_MAPPING
    parsed = set(GGUF_TO_TRANSFORMERS_MAPPING["config"].get(ours["model_type"].removesuffix("_text"), {}).values())
    unset = [k for k in _SHAPE_WIDTHS if k in ours and k not in parsed and k not in given]
    if not unset:
        return []
    theirs = AutoConfig.for_model(ours["model_type"], **{k: v for k, v in ours.items() if k in parsed})
    # A class without the attribute derives the width inside its model.
    return [k for k in unset if hasattr(theirs, k) and getattr(theirs, k) != ours[k]]


def _gguf_config(pretrained_model_name_or_path, gguf_file, hub, config_class=None, kwargs=None):
    """(config, unused kwargs) of a llama.cpp GGUF whose model transformers'
    GGUF loader does not know, which it would read as another (a llama file
    with experts is a Mixtral, which it parses as a Llama without them), or
    whose experts' widths its parsing drops (Qwen2-MoE, Qwen3-MoE).  The
    config is ckpt's, the config.json `ckpt convert model.gguf dir/` writes
    (ckpt_gguf_hf_config: Mixtral's num_local_experts, num_experts_per_tok…),
    made into `config_class` (None: its model type's) with the keywords
    `kwargs` applied as from_pretrained applies them.  None for a GGUF of a model
    transformers' loader knows (its own parsing then, as for every GGUF
    before), or one ckpt does not map."""
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES
    from transformers.utils import cached_file
    path = cached_file(pretrained_model_name_or_path, gguf_file, **{k: v for k, v in hub.items() if k in _HUB_KWARGS})
    with _api.open(path) as c:
        try:
            ours = json.loads(c._catalog.gguf_hf_config())
        except _api._ckpt.Error as e:
            if e.status != "CKPT_E_INVALID_ARGUMENT":
                raise
            return None
    # transformers' parsing names the model type after the GGUF's
    # architecture, gemma3's text model as gemma3_text: a model type of those
    # is one its loader knows, and its config stays transformers' as before,
    # unless its parsing drops a width the tensors' shapes need (_dropped).
    if ours["model_type"].removesuffix("_text") in GGUF_SUPPORTED_ARCHITECTURES and not _dropped(ours, kwargs or {}):
        return None
    # The dtype stays transformers' GGUF rule's (its parsing sets none):
    # config.json's, the bfloat16 a conversion dequantizes Q8_0 to, would
    # have made dtype="auto" load a quantized file in bfloat16 where
    # transformers' own GGUF load gives float32.
    ours.pop("dtype", None)
    if config_class is None:
        from transformers import CONFIG_MAPPING
        config_class = CONFIG_MAPPING[ours["model_type"]]
    return config_class.from_dict(ours, return_unused_kwargs=True, **(kwargs or {}))


def _gguf_names(path):
    """{Hugging Face name: (dtype, GGUF name)} of the model the library's GGUF →
    Hugging Face mapping (ckpt_gguf_hf_plan_joined: the tensors of `ckpt
    convert model.gguf dir/`, but a mixture of experts' as transformers'
    model holds them, each layer's experts.gate_up_proj — named by its
    ffn_gate_exps — and experts.down_proj) makes of a llama.cpp GGUF, or
    None when it does not map this one (a family it does not convert, a
    tensor it has no name for, rows it cannot put back): transformers' own
    loader reads it then."""
    from . import _ckpt
    with _api.open(path) as c:
        plan = _ckpt.Plan(c._catalog)
        try:
            plan.gguf_hf(None, False, True)  # the tensors alone: the tokenizer is transformers' own business here
        except _api._ckpt.Error as e:
            if e.status != "CKPT_E_INVALID_ARGUMENT":
                raise
            return None
        rows = c._catalog.tensors()
        return {item.name: (item.dtype, rows[item.source][0]) for item in plan.items()}


def _load(model, path, renames, converted, catalog_dtypes, dtype_plan, device_map, load_config, gguf_names=None,
          source=None):
    """Reads the checkpoint into the meta model: ckpt.load_into for every
    name that is only renamed, transformers' converters (on ckpt's views)
    for the names they combine or split; with gguf_names (_gguf_names'), a
    llama.cpp GGUF read through the library's GGUF → Hugging Face mapping
    (rules that select name its tensors by their GGUF names).  Returns
    transformers' LoadStateDictInfo, as its loader fills it."""
    from transformers.core_model_loading import convert_and_load_state_dict_in_model
    from transformers.utils.loading_report import LoadStateDictInfo
    targets = _target_dtypes(model, dtype_plan)
    device = _device_of(device_map)

    def loaded(name, tensor):
        tensor._is_hf_initialized = True  # as transformers' loader marks what it set: not initialised again

    as_hf = "joined" if gguf_names is not None else False
    sources = [_api._literal(gguf_names[n][1] if as_hf else n) for n in converted]  # select and exclude: file names
    non_persistent = {n for n, _ in model.named_buffers()} - set(model.state_dict())
    result = _api.load_into(model, path, strict=False, assign=True, device=device or "cpu",
                            dtype=_cast_rule({k: v for k, v in catalog_dtypes.items() if k not in converted},
                                             renames, targets),
                            rename=_rename_rules(renames), exclude=sources or None,
                            on_loaded=loaded, as_hf=as_hf, **(source or {}))
    info = LoadStateDictInfo(missing_keys=set(result.missing_keys) - non_persistent,
                             unexpected_keys=set(result.unexpected_keys),
                             mismatched_keys={(m.name, tuple(m.found.shape), tuple(m.expected.shape))
                                              for m in result.mismatched_keys},
                             conversion_errors={}, error_msgs=[], skipped_pp_keys=set())
    if converted:
        state = _api.load(path, select=sources, as_hf=as_hf, **(source or {}))
        conv_info, _ = convert_and_load_state_dict_in_model(model=model, state_dict=state, load_config=load_config)
        info.missing_keys &= conv_info.missing_keys
        info.unexpected_keys |= conv_info.unexpected_keys
        info.mismatched_keys |= conv_info.mismatched_keys
        info.conversion_errors.update(conv_info.conversion_errors)
        info.error_msgs += conv_info.error_msgs
    if device is None:
        _place(model, device_map)
    return info


def from_pretrained(pretrained_model_name_or_path, *model_args, **kwargs):
    """The model class the checkpoint's config.json names
    (`architectures[0]`; a GGUF's names none: the AutoModelForCausalLM of
    its model type; else the AutoModel of its model type), loaded as
    its from_pretrained would load it, the weights read by ckpt."""
    hub = {k: kwargs[k] for k in _HUB_KWARGS if k in kwargs}
    config = kwargs.get("config")
    ours = None
    if config is None and kwargs.get("gguf_file"):
        ours = _gguf_config(pretrained_model_name_or_path, kwargs["gguf_file"], hub)
    if ours is not None:
        config = ours[0]
    elif not isinstance(config, PreTrainedConfig):
        gguf = {"gguf_file": kwargs["gguf_file"]} if kwargs.get("gguf_file") else {}  # its config: the key-values'
        config = AutoConfig.from_pretrained(config or pretrained_model_name_or_path,
                                            trust_remote_code=kwargs.get("trust_remote_code"), **hub, **gguf)
    for arch in config.architectures or ():
        cls = getattr(transformers, arch, None)
        if isinstance(cls, type) and issubclass(cls, PreTrainedModel):
            return load_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs)
    if kwargs.get("gguf_file") and not config.architectures:
        # transformers' GGUF config names no architecture, and a llama.cpp
        # GGUF is a model that generates (its output.weight the head): the
        # causal LM of its type, where there is one.  AutoModel's base model
        # dropped the head, reported UNEXPECTED.
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
        if config.model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
            return __getattr__("AutoModelForCausalLM").from_pretrained(pretrained_model_name_or_path, *model_args,
                                                                       **kwargs)
    return AutoModel.from_pretrained(pretrained_model_name_or_path, *model_args, **kwargs)


class _Wrapper:
    """A transformers class under its own name here, with ckpt's from_pretrained."""

    def __init__(self, cls):
        self._cls = cls
        self.__name__ = cls.__name__
        self.__doc__ = f"{cls.__name__}, its weights read by ckpt (ckpt.transformers)."

    def __repr__(self):
        return f"ckpt.transformers.{self.__name__}"

    def from_config(self, *args, **kwargs):
        return self._cls.from_config(*args, **kwargs)


class _Auto(_Wrapper):
    """One of transformers' Auto classes, whose from_pretrained loads the
    weights with ckpt: the config and the model class are found exactly as
    the Auto class finds them, then load_pretrained builds and fills it."""

    def from_pretrained(self, pretrained_model_name_or_path, *model_args, **kwargs):
        if _transformers_does_it(kwargs):
            return self._cls.from_pretrained(pretrained_model_name_or_path, *model_args, **kwargs)
        from transformers.models.auto.auto_factory import _get_model_class
        auto = self._cls
        config = kwargs.pop("config", None)
        kwargs["_from_auto"] = True
        hub = {k: kwargs.pop(k) for k in _HUB_KWARGS if k in kwargs}
        hub["revision"] = _resolve_revision(pretrained_model_name_or_path, hub)
        if not isinstance(config, PreTrainedConfig):
            code_revision = kwargs.pop("code_revision", None)
            given = {k: kwargs[k] for k in ("dtype", "torch_dtype") if kwargs.get(k) is not None}
            passed = {k: v for k, v in kwargs.items() if not (k in given and v == "auto")}
            ours = None
            if config is None and kwargs.get("gguf_file"):
                ours = _gguf_config(pretrained_model_name_or_path, kwargs["gguf_file"], hub, None, passed)
            if ours is not None:
                config, kwargs = ours
            else:
                config, kwargs = AutoConfig.from_pretrained(pretrained_model_name_or_path, return_unused_kwargs=True,
                                                            code_revision=code_revision, **hub, **passed)
            kwargs.update(given)  # as the Auto class: the user's dtype wins over the config's
        if type(config) not in auto._model_mapping:
            raise ValueError(f"Unrecognized configuration class {config.__class__} for this kind of AutoModel: "
                             f"{auto.__name__}.\nModel type should be one of "
                             f"{', '.join(c.__name__ for c in auto._model_mapping)}.")
        model_class = _get_model_class(config, auto._model_mapping)
        text_config_class = config.sub_configs.get("text_config", None)
        if text_config_class is not None and getattr(model_class, "config_class", None) == text_config_class:
            config = config.get_text_config()
        return load_pretrained(model_class, pretrained_model_name_or_path, *model_args, config=config, **hub,
                               **kwargs)


class _Model(_Wrapper):
    """A transformers model class whose from_pretrained reads the weights
    with ckpt."""

    def from_pretrained(self, pretrained_model_name_or_path, *model_args, **kwargs):
        return load_pretrained(self._cls, pretrained_model_name_or_path, *model_args, **kwargs)


def __getattr__(name):
    """ckpt.transformers.AutoModelForCausalLM, …LlamaForCausalLM: the class
    of that name in transformers, with ckpt's from_pretrained."""
    from transformers.models.auto.auto_factory import _BaseAutoModelClass
    cls = getattr(transformers, name, None) if not name.startswith("_") else None
    if isinstance(cls, type) and issubclass(cls, _BaseAutoModelClass):
        wrapper = _Auto(cls)
    elif isinstance(cls, type) and issubclass(cls, PreTrainedModel):
        wrapper = _Model(cls)
    else:
        raise AttributeError(f"module 'ckpt.transformers' has no attribute {name!r} (transformers has no Auto "
                             f"class or model class of that name)")
    globals()[name] = wrapper
    return wrapper


AutoModel = __getattr__("AutoModel")
