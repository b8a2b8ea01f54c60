"""Small models in plain torch with random weights (nothing downloaded), at batch 1.

Each factory returns `(module, example_inputs)`, the form `tensortune tune-model` takes:
`tensortune tune-model tensortune/model/zoo.py:resnet18`. Weights are seeded, so a model's
kernels (and so its records) are the same from run to run.
"""
from __future__ import annotations

import math

import torch
from torch import nn


def _seeded(build):
    torch.manual_seed(0)
    return build().eval()


class _Basic(nn.Module):
    """ResNet's basic block: two 3x3 convs with batch norm, a projection when the shape changes."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                     if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.down(x))


class ResNet18(nn.Module):
    def __init__(self, classes: int = 1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        widths, blocks, cin = (64, 128, 256, 512), [], 64
        for i, width in enumerate(widths):
            stride = 1 if i == 0 else 2
            blocks += [_Basic(cin, width, stride), _Basic(width, width, 1)]
            cin = width
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        y = self.blocks(self.stem(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(y, 1), 1))


class _Bottleneck(nn.Module):
    """ResNet-50's bottleneck block: 1x1 reduce, 3x3, 1x1 expand (4x), batch norm after each,
    a projection when the shape changes."""

    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        cout = 4 * width
        self.body = nn.Sequential(
            nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.down = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                     if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x):
        return torch.relu(self.body(x) + self.down(x))


class ResNet50(nn.Module):
    def __init__(self, classes: int = 1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], 64
        for i, (width, count) in enumerate(zip((64, 128, 256, 512), (3, 4, 6, 3))):
            for j in range(count):
                blocks.append(_Bottleneck(cin, width, 2 if i > 0 and j == 0 else 1))
                cin = 4 * width
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        y = self.blocks(self.stem(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(y, 1), 1))


class _Inverted(nn.Module):
    """MobileNetV2's inverted residual: 1x1 expand, 3x3 depthwise, 1x1 project."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int):
        super().__init__()
        hidden = cin * expand
        layers = [] if expand == 1 else [nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6()]
        layers += [nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False), nn.BatchNorm2d(hidden),
                   nn.ReLU6(), nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.body(x) if self.residual else self.body(x)


class MobileNetV2(nn.Module):
    SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                (6, 320, 1, 1))  # (expansion, channels, repeats, first stride)

    def __init__(self, classes: int = 1000):
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU6()]
        cin = 32
        for expand, cout, repeats, stride in self.SETTINGS:
            for i in range(repeats):
                layers.append(_Inverted(cin, cout, stride if i == 0 else 1, expand))
                cin = cout
        layers += [nn.Conv2d(cin, 1280, 1, bias=False), nn.BatchNorm2d(1280), nn.ReLU6()]
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(1280, classes)

    def forward(self, x):
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


class _Attention(nn.Module):
    """Multi-head self-attention written out (no fused kernels), optionally causal."""

    def __init__(self, width: int, heads: int, causal: bool, length: int):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)
        if causal:
            self.register_buffer("mask", torch.full((length, length), float("-inf")).triu(1))

    def forward(self, x):
        batch, length, width = x.shape
        q, k, v = self.qkv(x).split(width, dim=-1)
        q, k, v = (t.reshape(batch, length, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-1, -2) / math.sqrt(width // self.heads)
        if self.causal:
            scores = scores + self.mask
        y = torch.softmax(scores, dim=-1) @ v
        return self.out(y.transpose(1, 2).reshape(batch, length, width))


class EncoderLayer(nn.Module):
    """A BERT encoder layer: attention, then a GELU feed-forward, each with a residual and a
    LayerNorm after it."""

    def __init__(self, width: int = 768, heads: int = 12, hidden: int = 3072, length: int = 128):
        super().__init__()
        self.attention = _Attention(width, heads, False, length)
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.ffn = nn.Sequential(nn.Linear(width, hidden), nn.GELU(), nn.Linear(hidden, width))

    def forward(self, x):
        x = self.norm1(x + self.attention(x))
        return self.norm2(x + self.ffn(x))


class DecoderBlock(nn.Module):
    """A pre-LayerNorm block: attention and a GELU MLP, with residuals. GPT-2's is causal with
    tanh GELU; ViT's encoder block is neither."""

    def __init__(self, width: int = 768, heads: int = 12, length: int = 128, causal: bool = True, gelu: str = "tanh"):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attention = _Attention(width, heads, causal, length)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(approximate=gelu), nn.Linear(4 * width, width))

    def forward(self, x):
        x = x + self.attention(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ConvBlock(nn.Module):
    """A tiny conv block (conv, batch norm, ReLU, linear head): for tests and the quick start."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8 * 8 * 8, 10)

    def forward(self, x):
        return self.fc(torch.relu(self.bn(self.conv(x))).flatten(1))


def resnet18():
    """ResNet-18, 224x224 RGB."""
    return _seeded(ResNet18), (torch.randn(1, 3, 224, 224),)


def resnet50():
    """ResNet-50, 224x224 RGB."""
    return _seeded(ResNet50), (torch.randn(1, 3, 224, 224),)


def mobilenet_v2():
    """MobileNetV2, 224x224 RGB, its batch norm statistics taken from a calibration batch (with
    default statistics and random weights its activations fade to 1e-7 by the last layer, and
    any kernel would match eager)."""
    model = _seeded(MobileNetV2)
    _calibrate(model, torch.randn(4, 3, 224, 224))
    return model, (torch.randn(1, 3, 224, 224),)


def _calibrate(model: nn.Module, batch: torch.Tensor) -> None:
    """Batch norm's running statistics set to those of `batch` (layer by layer, in one pass):
    each layer then normalises what reaches it, as in a trained model."""
    for layer in model.modules():
        if isinstance(layer, nn.BatchNorm2d):
            layer.reset_running_stats()
            layer.momentum = None  # a cumulative average: after one batch, that batch's statistics
    with torch.no_grad():
        model.train()(batch)
    model.eval()


def bert_layer():
    """One BERT-base encoder layer, sequence 128."""
    return _seeded(EncoderLayer), (torch.randn(1, 128, 768),)


def gpt_block():
    """One GPT-2-small decoder block, sequence 128."""
    return _seeded(DecoderBlock), (torch.randn(1, 128, 768),)


def vit_block():
    """One ViT-B/16 encoder block: 196 patches and the class token (sequence 197), width 768."""
    return _seeded(lambda: DecoderBlock(768, 12, 197, causal=False, gelu="none")), (torch.randn(1, 197, 768),)


def conv_block():
    """A tiny conv block on 8x8 images (tests, quick start)."""
    return _seeded(ConvBlock), (torch.randn(1, 3, 8, 8),)


def tiny_transformer():
    """A tiny encoder layer (width 32, 2 heads, sequence 8): tests, quick start."""
    return _seeded(lambda: EncoderLayer(32, 2, 64, 8)), (torch.randn(1, 8, 32),)


class _LogitsOnly(nn.Module):
    """A Hugging Face causal language model called as plain torch: token ids in, logits out."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(ids, use_cache=False).logits


def hf_gpt2_tiny(layers: int = 2):
    """GPT-2 from Hugging Face `transformers`, built from its config (2 layers unless told,
    width 64, 2 heads, vocabulary 512; eager attention; random weights, nothing downloaded),
    32 tokens."""
    transformers = _transformers("hf_gpt2_tiny")
    config = transformers.GPT2Config(n_layer=layers, n_embd=64, n_head=2, vocab_size=512, n_positions=64, attn_implementation="eager")
    return _seeded(lambda: _LogitsOnly(transformers.GPT2LMHeadModel(config))), (torch.randint(0, 512, (1, 32)),)


class _Features(nn.Module):
    """A Hugging Face model called as plain torch: a tensor in, its last hidden state out."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x).last_hidden_state


def hf_resnet50():
    """ResNet-50 from Hugging Face `transformers` (ResNetModel from its default config: random
    weights, nothing downloaded; batch norm calibrated as mobilenet_v2's), 224x224 RGB."""
    transformers = _transformers("hf_resnet50")
    model = _seeded(lambda: _Features(transformers.ResNetModel(transformers.ResNetConfig())))
    _calibrate(model, torch.randn(4, 3, 224, 224))
    return model, (torch.randn(1, 3, 224, 224),)


def hf_bert_mini():
    """A BERT-mini encoder from Hugging Face `transformers` (4 layers, width 256, 4 heads, from
    its config: random weights, nothing downloaded; eager attention), 128 tokens."""
    transformers = _transformers("hf_bert_mini")
    config = transformers.BertConfig(num_hidden_layers=4, hidden_size=256, num_attention_heads=4,
                                     intermediate_size=1024, vocab_size=8192, attn_implementation="eager")
    return _seeded(lambda: _Features(transformers.BertModel(config, add_pooling_layer=False))), \
        (torch.randint(0, 8192, (1, 128)),)


def _transformers(name: str):
    from ..errors import UserError

    try:
        import transformers
    except ImportError:
        raise UserError(f"{name} needs transformers: pip install -e '.[test]'") from None
    return transformers


ZOO = {f.__name__: f for f in (resnet18, resnet50, mobilenet_v2, bert_layer, gpt_block, vit_block, conv_block,
                               tiny_transformer, hf_gpt2_tiny, hf_resnet50, hf_bert_mini)}
