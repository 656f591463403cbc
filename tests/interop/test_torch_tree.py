"""A torch file's tree is torch's structure (issue 27, item 2).

ckpt.open(p).tree() and ckpt.load(p, nested=True) give what
torch.load(p, weights_only=True) gives: a state dict stays one dict keyed
"conv1.weight", a training checkpoint keeps its model's state dict whole
beside the optimizer, the epoch and the scheduler, so that
model.load_state_dict(tree["model"]) works.  So do a DCP checkpoint of the
same (as dcp_to_torch_save then torch.load give it) and a conversion to
safetensors, which records the tree whenever it is more than a state dict.

The models: transformers' Llama and BERT and diffusers' UNet from small
configs (a UNet's own .bin file, as save_pretrained writes it, too), and
torchvision's ResNet-18 and timm's ViT built in torch with their state
dicts' keys (torch_models.ResNet18, TimmViT): the wheels of torchvision on
the package index are built for CUDA and do not import beside the pinned
CPU torch, nor timm, which imports torchvision."""
import warnings

import pytest
import torch

import ckpt
from torch_models import ResNet18, TimmViT


def assert_same(got, want, where="<root>"):
    """Same containers (dict and OrderedDict count as one: ckpt gives
    dicts), same keys in the same order, equal tensors (dtype, shape,
    values), equal values of the same type."""
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), (where, type(got))
        assert (got.dtype, got.shape) == (want.dtype, want.shape), where
        assert torch.equal(got, want), where
    elif isinstance(want, dict):
        assert isinstance(got, dict), (where, type(got))
        assert list(got) == list(want), (where, list(got)[:5], list(want)[:5])
        for k in want:
            assert_same(got[k], want[k], f"{where}[{k!r}]")
    elif isinstance(want, (list, tuple)):
        assert type(got) is type(want) and len(got) == len(want), (where, got)
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{where}[{i}]")
    else:
        assert type(got) is type(want) and got == want, (where, got, want)


def tree_of(path, **source):
    """ckpt.open(path).tree() with the tensors read as torch tensors."""
    with ckpt.open(path, **source) as c:
        return c.tree(lambda name: c.get(name, framework="pt"))


def resnet18():
    torch.manual_seed(0)
    m = ResNet18()
    m(torch.randn(2, 3, 32, 32))  # BatchNorm statistics that are not their defaults
    return m


def timm_vit():
    torch.manual_seed(0)
    return TimmViT()


def unet():
    from diffusers import UNet2DModel
    torch.manual_seed(0)
    return UNet2DModel(sample_size=8, block_out_channels=(8, 16), layers_per_block=1, norm_num_groups=4,
                       attention_head_dim=4, down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                       up_block_types=("AttnUpBlock2D", "UpBlock2D"))


def llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                        tie_word_embeddings=True))


def bert():
    from transformers import BertConfig, BertForMaskedLM
    torch.manual_seed(0)
    return BertForMaskedLM(BertConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                      intermediate_size=64, max_position_embeddings=64))


MODELS = {"resnet18": resnet18, "timm_vit": timm_vit, "llama": llama, "bert": bert, "unet": unet}


def training(model):
    """{'model', 'optimizer', 'epoch', 'scheduler'} after one AdamW step."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    opt.step()
    sched.step()
    return {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 3, "scheduler": sched.state_dict()}


@pytest.mark.parametrize("kind", MODELS)
def test_state_dict_is_torch_loads(tmp_path, kind):
    model = MODELS[kind]()
    torch.save(model.state_dict(), tmp_path / "m.pth")
    want = torch.load(tmp_path / "m.pth", weights_only=True)
    assert_same(tree_of(tmp_path / "m.pth"), want)  # {'conv1.weight': …}, not {'conv1': {'weight': …}}
    nested = ckpt.load(tmp_path / "m.pth", nested=True)
    assert_same(nested, want)
    MODELS[kind]().load_state_dict(nested)


@pytest.mark.parametrize("kind", ["resnet18", "timm_vit", "llama", "unet"])
def test_training_checkpoint_is_torch_loads(tmp_path, kind):
    torch.save(training(MODELS[kind]()), tmp_path / "train.pt")
    want = torch.load(tmp_path / "train.pt", weights_only=True)
    tree = tree_of(tmp_path / "train.pt")
    assert_same(tree, want)
    MODELS[kind]().load_state_dict(tree["model"])
    assert_same(ckpt.load(tmp_path / "train.pt", nested=True), want)
    # A selection keeps torch's structure of what it keeps.
    assert_same(ckpt.load(tmp_path / "train.pt", nested=True, select="model.*"), {"model": want["model"]})
    rest = ckpt.load(tmp_path / "train.pt", nested=True, exclude="optimizer.*")
    assert_same(rest, {k: v for k, v in want.items() if k != "optimizer"})
    MODELS[kind]().load_state_dict(rest["model"])


def test_diffusers_file_is_torch_loads(tmp_path):
    """The .bin file diffusers' save_pretrained writes without safetensors."""
    unet().save_pretrained(tmp_path / "unet", safe_serialization=False)
    path = tmp_path / "unet" / "diffusion_pytorch_model.bin"
    want = torch.load(path, weights_only=True)
    assert_same(tree_of(path), want)
    nested = ckpt.load(path, nested=True)
    assert_same(nested, want)
    unet().load_state_dict(nested)


def test_state_dicts_in_a_dict_are_torch_loads(tmp_path):
    """Dicts of only tensors, nested: nothing but the tree tells the key
    "model" of "conv1.weight" from three levels."""
    model = llama()
    obj = {"model": model.state_dict(), "ema": {k: v * 0.5 for k, v in model.state_dict().items()}}
    torch.save(obj, tmp_path / "m.pt")
    want = torch.load(tmp_path / "m.pt", weights_only=True)
    assert_same(tree_of(tmp_path / "m.pt"), want)
    assert_same(ckpt.load(tmp_path / "m.pt", nested=True), want)


@pytest.mark.parametrize("shards", [False, True], ids=["file", "shards"])
def test_converted_training_checkpoint_keeps_torchs_structure(tmp_path, shards):
    torch.save(training(llama()), tmp_path / "train.pt")
    want = torch.load(tmp_path / "train.pt", weights_only=True)
    out = tmp_path / ("out" if shards else "out.safetensors")
    if shards:
        out.mkdir()  # a directory: shards and their index
    ckpt.convert(tmp_path / "train.pt", out, max_shard_size="8KB" if shards else None, progress=False)
    with ckpt.open(out) as c:
        assert len(c.files) > 1 if shards else len(c.files) == 1
    tree = tree_of(out)
    assert_same(tree, want)
    llama().load_state_dict(tree["model"])
    assert_same(ckpt.load(out, nested=True), want)
    assert_same(ckpt.load(out, nested=True, select="model.*"), {"model": want["model"]})


def same_files(a, b):
    names = sorted(p.name for p in b.iterdir())
    assert sorted(p.name for p in a.iterdir()) == names
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_converted_state_dict_is_the_hubs(tmp_path):
    """A state dict converts to what the hub writes, recording no tree: its
    keys are its names (ckpt.load(nested=False) is the state dict; a
    safetensors file's tree is its names split at dots).  So does the
    model taken out of a training checkpoint (--select 'model.*' --rename
    model.=); selected alone, it stays the dict under "model"."""
    from huggingface_hub import save_torch_state_dict
    train = training(llama())
    sd = train["model"]
    torch.save(sd, tmp_path / "m.bin")
    torch.save(train, tmp_path / "train.pt")
    for d in ("hub", "flat", "extracted"):
        (tmp_path / d).mkdir()
    save_torch_state_dict(sd, tmp_path / "hub", max_shard_size="8KB")
    ckpt.convert(tmp_path / "m.bin", tmp_path / "flat", max_shard_size="8KB", progress=False)
    same_files(tmp_path / "flat", tmp_path / "hub")
    ckpt.convert(tmp_path / "train.pt", tmp_path / "extracted", max_shard_size="8KB", select="model.*",
                 rename={"model.": ""}, progress=False)
    same_files(tmp_path / "extracted", tmp_path / "hub")
    split = ckpt.load(tmp_path / "hub", nested=True)
    assert split["model"]["layers"][1]["mlp"]["up_proj"]["weight"].shape == (64, 32)
    assert_same(ckpt.load(tmp_path / "flat", nested=True), split)
    ckpt.convert(tmp_path / "train.pt", tmp_path / "model.safetensors", select="model.*", progress=False)
    want = torch.load(tmp_path / "train.pt", weights_only=True)["model"]
    assert_same(tree_of(tmp_path / "model.safetensors"), {"model": want})


def dcp_save(obj, directory):
    import torch.distributed.checkpoint as dcp
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "no process group": one process saves alone
        dcp.save(obj, checkpoint_id=str(directory))


def dcp_reference(directory, tmp_path):
    """What torch makes of a DCP checkpoint: dcp_to_torch_save, torch.load."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    dcp_to_torch_save(str(directory), str(tmp_path / "ref.pt"))
    return torch.load(tmp_path / "ref.pt", weights_only=True)


@pytest.mark.parametrize("what", ["training", "model"])
def test_dcp_is_dcp_to_torch_saves(tmp_path, what):
    obj = training(resnet18()) if what == "training" else {"model": resnet18().state_dict()}
    dcp_save(obj, tmp_path / "dcp")
    want = dcp_reference(tmp_path / "dcp", tmp_path)
    tree = tree_of(tmp_path / "dcp")
    assert_same(tree, want)
    ResNet18().load_state_dict(tree["model"])
    assert_same(ckpt.load(tmp_path / "dcp", nested=True), want)
    # Converted to safetensors, the tree it records gives it back.
    ckpt.convert(tmp_path / "dcp", tmp_path / "out.safetensors", progress=False)
    assert_same(tree_of(tmp_path / "out.safetensors"), want)
    assert_same(ckpt.load(tmp_path / "out.safetensors", nested=True), want)
