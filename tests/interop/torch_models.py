"""Small real architectures, built in torch (no torchvision needed)."""
import torch
from torch import nn


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        return torch.relu(y + (self.downsample(x) if self.downsample is not None else x))


class TinyResNet(nn.Module):
    def __init__(self, widths=(16, 32, 64), classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, widths[0], 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        layers, cin = [], widths[0]
        for i, w in enumerate(widths):
            layers.append(nn.Sequential(BasicBlock(cin, w, 1 if i == 0 else 2), BasicBlock(w, w)))
            cin = w
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)


class ResNet18(nn.Module):
    """torchvision.models.resnet18's modules in their order, so its state
    dict's keys ("layer2.0.downsample.1.running_mean", …; timm's resnet18
    has the same): torchvision's wheel on the package index is built for
    CUDA and does not import beside the pinned CPU torch (nor timm, which
    imports it)."""

    def __init__(self, classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        cin = 64
        for i, w in enumerate((64, 128, 256, 512)):
            setattr(self, f"layer{i + 1}", nn.Sequential(BasicBlock(cin, w, 1 if i == 0 else 2), BasicBlock(w, w)))
            cin = w
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        for i in range(4):
            x = getattr(self, f"layer{i + 1}")(x)
        return self.fc(x.mean((2, 3)))


class TimmBlock(nn.Module):
    def __init__(self, dim, heads=3):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = nn.Module()
        self.attn.qkv = nn.Linear(dim, 3 * dim)
        self.attn.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Module()
        self.mlp.fc1 = nn.Linear(dim, 4 * dim)
        self.mlp.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.attn.qkv(self.norm1(x)).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, d)
        x = x + self.attn.proj(a)
        return x + self.mlp.fc2(torch.nn.functional.gelu(self.mlp.fc1(self.norm2(x))))


class TimmViT(nn.Module):
    """timm's VisionTransformer (vit_tiny_patch16_224, img_size=32,
    depth=2: its state dict's keys in their order — "cls_token" and
    "pos_embed" at the top, "blocks.0.attn.qkv.weight", …), built in torch
    as ResNet18 is, for the same reason."""

    def __init__(self, dim=192, depth=2, patches=4, classes=1000):
        super().__init__()
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, patches + 1, dim) * 0.02)
        self.patch_embed = nn.Module()
        self.patch_embed.proj = nn.Conv2d(3, dim, 16, 16)
        self.blocks = nn.Sequential(*(TimmBlock(dim) for _ in range(depth)))
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.patch_embed.proj(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(len(x), -1, -1), x], 1) + self.pos_embed
        return self.head(self.norm(self.blocks(x))[:, 0])


def tiny_transformer():
    layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, batch_first=True)
    model = nn.Sequential(nn.Embedding(100, 32), nn.TransformerEncoder(layer, num_layers=2), nn.Linear(32, 100))
    model[2].weight = model[0].weight  # tied embeddings: two names, one storage
    return model


def conv_net():
    return nn.Sequential(nn.Conv2d(1, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 4, 3), nn.BatchNorm2d(4),
                         nn.Flatten(), nn.Linear(4 * 24 * 24, 10))


def trained(model, steps=2):
    """A model with BatchNorm statistics and an Adam state."""
    torch.manual_seed(0)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    return model, opt
