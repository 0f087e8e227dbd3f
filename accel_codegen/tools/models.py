"""A small model zoo in plain PyTorch, for exercising the frontends and the offload flow.

Every model is built from a fixed seed, put in eval mode and given weights that look
"trained enough" for numerical tests:

* convolution and linear weights are drawn from N(0, 2 / fan_in) (He / Kaiming, fan-in
  mode), so activations keep a second moment of O(1) through deep ReLU stacks; biases
  are drawn from N(0, 0.1);
* batch-norm layers get non-trivial running statistics and affine parameters
  (``running_mean ~ N(0, 0.1)``, ``running_var ~ U(0.5, 1.5)``, ``weight ~ U(0.5, 1.5)``,
  ``bias ~ N(0, 0.1)``), so a frontend or backend that drops or mis-folds batch norm
  produces visibly wrong numbers;
* layer-norm affine parameters are randomised the same way as batch norm's.

Because those statistics do not match the actual activations, batch norm does not
normalise anything: on average it multiplies the variance by E[gamma^2] E[1 / var]
= (13/12) ln 3 ~ 1.19. A convolution that feeds a batch norm is scaled down by the square
root of that, and the last convolution of every residual branch is also scaled by
:data:`RESIDUAL_BRANCH_GAIN` (like "zero-init residual", without zeroing the branch), since
each ``x + branch(x)`` adds variance. With seeds 0-3 the logits of every model have a
standard deviation between 0.5 and 10.

The models follow the published architectures; the only deliberate deviation is VGG's
classifier (see :func:`vgg11_bn`). ``torch`` is imported at module level: this module is
only imported when the zoo is used, and ``accel_codegen/__init__.py`` does not import it.

Usage::

    from accel_codegen.models import get_model
    model, inputs = get_model("resnet18", batch=1, seed=0)
    logits = model(*inputs)
"""
from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from ..errors import AccelInvalidError

__all__ = ["MODELS", "ModelAndInputs", "get_model", "lenet5", "resnet18", "resnet50",
           "vgg11_bn", "mobilenet_v1", "mixed_block", "RESIDUAL_BRANCH_GAIN"]

#: What every zoo function returns: the model in eval mode and its example inputs.
ModelAndInputs = tuple[nn.Module, tuple[torch.Tensor, ...]]

#: Scale applied to the last convolution of every residual branch (see module docstring).
RESIDUAL_BRANCH_GAIN = 0.3

# E[gamma^2] * E[1 / running_var] for gamma, running_var ~ U(0.5, 1.5): (13/12) * ln 3. With
# stats that do not match the activations, each batch norm multiplies the variance by about this.
_BN_VARIANCE_GAIN = 13.0 / 12.0 * math.log(3.0)

# Inputs and weights use separate streams, so changing the model never changes its inputs.
_INPUT_STREAM = 0x5EED


# --------------------------------------------------------------------------------------
# Initialisation
# --------------------------------------------------------------------------------------
def _init_weights(model: nn.Module, gen: torch.Generator) -> None:
    """Overwrite every parameter and batch-norm buffer of ``model`` from ``gen``."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (nn.Conv2d, nn.Linear)):
                w = module.weight
                fan_in = w[0].numel()  # in_channels / groups * kh * kw, or in_features
                w.copy_(torch.randn(w.shape, generator=gen) * math.sqrt(2.0 / fan_in))
                if module.bias is not None:
                    module.bias.copy_(torch.randn(module.bias.shape, generator=gen) * 0.1)
            elif isinstance(module, nn.BatchNorm2d):
                c = module.num_features
                module.weight.copy_(torch.rand(c, generator=gen) + 0.5)
                module.bias.copy_(torch.randn(c, generator=gen) * 0.1)
                module.running_mean.copy_(torch.randn(c, generator=gen) * 0.1)
                module.running_var.copy_(torch.rand(c, generator=gen) + 0.5)
            elif isinstance(module, nn.LayerNorm):
                shape = module.normalized_shape
                module.weight.copy_(torch.rand(shape, generator=gen) + 0.5)
                module.bias.copy_(torch.randn(shape, generator=gen) * 0.1)
        # A conv feeding a batch norm is scaled down by the norm's expected variance gain.
        previous = None
        for module in model.modules():
            if (isinstance(module, nn.BatchNorm2d) and isinstance(previous, nn.Conv2d)
                    and previous.out_channels == module.num_features):
                previous.weight.mul_(1.0 / math.sqrt(_BN_VARIANCE_GAIN))
            previous = module
        for module in model.modules():
            last = getattr(module, "branch_last_conv", None)
            if last is not None:
                getattr(module, last).weight.mul_(RESIDUAL_BRANCH_GAIN)


def _build(factory: Callable[[], nn.Module], input_shape: tuple[int, ...], batch: int,
           seed: int) -> ModelAndInputs:
    """Construct, initialise and freeze a model, and draw its example input.

    The global torch RNG is forked, so building a model leaves the caller's RNG state
    untouched (the constructors' default initialisers draw from it before we overwrite).
    """
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
        raise AccelInvalidError(f"batch = {batch!r} must be a positive int")
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise AccelInvalidError(f"seed = {seed!r} must be a non-negative int")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = factory()
    _init_weights(model, torch.Generator().manual_seed(seed))
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    x = torch.randn((batch, *input_shape), generator=torch.Generator().manual_seed(
        seed ^ _INPUT_STREAM))
    return model, (x,)


def _conv_bn(cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1) -> list[nn.Module]:
    """conv (no bias, 'same'-style padding) + batch norm, as used by ResNet and MobileNet."""
    return [nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False),
            nn.BatchNorm2d(cout)]


# --------------------------------------------------------------------------------------
# LeNet-5
# --------------------------------------------------------------------------------------
class LeNet5(nn.Module):
    """LeNet-5 (LeCun et al., 1998) with the modern ReLU + max-pool substitutions."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 6, 5), nn.ReLU(), nn.MaxPool2d(2),     # 32 -> 28 -> 14
            nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),    # 14 -> 10 -> 5
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(16 * 5 * 5, 120), nn.ReLU(),
            nn.Linear(120, 84), nn.ReLU(),
            nn.Linear(84, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


def lenet5(*, batch: int = 1, seed: int = 0) -> ModelAndInputs:
    """LeNet-5 on a 1x32x32 input: conv5x5(6) - pool - conv5x5(16) - pool - fc 120/84/10. Input
    (batch, 1, 32, 32); ``batch`` and ``seed`` as for :func:`get_model`."""
    return _build(LeNet5, (1, 32, 32), batch, seed)


# --------------------------------------------------------------------------------------
# ResNet (torchvision layout, "v1.5": the stride sits on the bottleneck's 3x3 conv)
# --------------------------------------------------------------------------------------
class BasicBlock(nn.Module):
    """Two 3x3 conv-BN layers with an identity or 1x1-conv-BN shortcut."""

    expansion = 1
    branch_last_conv = "conv2"  # a name, not a module: an alias would duplicate state_dict keys

    def __init__(self, cin: int, width: int, stride: int = 1):
        super().__init__()
        cout = width * self.expansion
        self.conv1, self.bn1 = _conv_bn(cin, width, 3, stride)
        self.conv2, self.bn2 = _conv_bn(width, cout, 3)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = (nn.Sequential(*_conv_bn(cin, cout, 1, stride))
                           if stride != 1 or cin != cout else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (strided), 1x1 expand (x4), each conv followed by BN."""

    expansion = 4
    branch_last_conv = "conv3"

    def __init__(self, cin: int, width: int, stride: int = 1):
        super().__init__()
        cout = width * self.expansion
        self.conv1, self.bn1 = _conv_bn(cin, width, 1)
        self.conv2, self.bn2 = _conv_bn(width, width, 3, stride)
        self.conv3, self.bn3 = _conv_bn(width, cout, 1)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = (nn.Sequential(*_conv_bn(cin, cout, 1, stride))
                           if stride != 1 or cin != cout else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    """ResNet for 224x224 ImageNet inputs (He et al., 2016), torchvision module layout."""

    def __init__(self, block: type[BasicBlock] | type[Bottleneck], layers: list[int],
                 num_classes: int = 1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        cin = 64
        stages = []
        for i, (width, depth) in enumerate(zip((64, 128, 256, 512), layers)):
            blocks = []
            for j in range(depth):
                blocks.append(block(cin, width, 2 if (i > 0 and j == 0) else 1))
                cin = width * block.expansion
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet18(*, batch: int = 1, seed: int = 0) -> ModelAndInputs:
    """ResNet-18 (basic blocks, [2, 2, 2, 2]) on a 3x224x224 input, 1000 classes. Input (batch,
    3, 224, 224); ``batch`` and ``seed`` as for :func:`get_model`."""
    return _build(lambda: ResNet(BasicBlock, [2, 2, 2, 2]), (3, 224, 224), batch, seed)


def resnet50(*, batch: int = 1, seed: int = 0) -> ModelAndInputs:
    """ResNet-50 (bottleneck blocks, [3, 4, 6, 3]) on a 3x224x224 input, 1000 classes. Input
    (batch, 3, 224, 224); ``batch`` and ``seed`` as for :func:`get_model`."""
    return _build(lambda: ResNet(Bottleneck, [3, 4, 6, 3]), (3, 224, 224), batch, seed)


# --------------------------------------------------------------------------------------
# VGG-11 with batch norm
# --------------------------------------------------------------------------------------
_VGG11_CFG = (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M")


class VGG(nn.Module):
    """VGG feature extractor (configuration A, with BN) and a narrowed classifier."""

    def __init__(self, cfg: tuple[int | str, ...], hidden: int = 512, num_classes: int = 1000):
        super().__init__()
        layers: list[nn.Module] = []
        cin = 3
        for v in cfg:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(cin, v, 3, padding=1), nn.BatchNorm2d(v),
                           nn.ReLU(inplace=True)]
                cin = v
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(
            nn.Linear(cin * 7 * 7, hidden), nn.ReLU(inplace=True), nn.Dropout(),
            nn.Linear(hidden, hidden), nn.ReLU(inplace=True), nn.Dropout(),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


def vgg11_bn(*, batch: int = 1, seed: int = 0) -> ModelAndInputs:
    """VGG-11 with batch norm (Simonyan & Zisserman, 2015, configuration A) on 3x224x224. The
    feature extractor is the published one: eight 3x3 convolutions with bias, each followed by
    batch norm and ReLU, and five 2x2 max pools. The classifier keeps the published shape
    (flatten 512x7x7, two hidden fully connected layers with ReLU and dropout, 1000 classes) but
    its hidden layers have 512 units instead of 4096: 22.8 M parameters (91 MB) instead of 133 M
    (531 MB). Dropout is the identity in eval mode. Input (batch, 3, 224, 224); ``batch`` and
    ``seed`` as for :func:`get_model`."""
    return _build(lambda: VGG(_VGG11_CFG), (3, 224, 224), batch, seed)


# --------------------------------------------------------------------------------------
# MobileNet v1
# --------------------------------------------------------------------------------------
# (output channels, stride) of the 13 depthwise-separable blocks, width multiplier 1.0.
_MOBILENET_V1_BLOCKS = ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2),
                        (512, 1), (512, 1), (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1))


class MobileNetV1(nn.Module):
    """MobileNet v1 (Howard et al., 2017): a 3x3/2 stem then depthwise-separable blocks."""

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        layers = [*_conv_bn(3, 32, 3, 2), nn.ReLU6(inplace=True)]
        cin = 32
        for cout, stride in _MOBILENET_V1_BLOCKS:
            layers += [*_conv_bn(cin, cin, 3, stride, groups=cin), nn.ReLU6(inplace=True),
                       *_conv_bn(cin, cout, 1), nn.ReLU6(inplace=True)]  # depthwise, pointwise
            cin = cout
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.avgpool(self.features(x)), 1))


def mobilenet_v1(*, batch: int = 1, seed: int = 0) -> ModelAndInputs:
    """MobileNet v1, width 1.0, on a 3x224x224 input; conv (no bias) + BN + ReLU6 throughout.
    Input (batch, 3, 224, 224); ``batch`` and ``seed`` as for :func:`get_model`."""
    return _build(MobileNetV1, (3, 224, 224), batch, seed)


# --------------------------------------------------------------------------------------
# A mixed CNN / attention block: ops the accelerator lacks
# --------------------------------------------------------------------------------------
class MixedBlock(nn.Module):
    """Patch-conv stem + BN + ReLU, then one pre-norm self-attention layer and a linear head.

    The stem (conv, BN, ReLU) is accelerator material; layer norm, the batched matmuls of
    attention (``torch.bmm`` on 3-D tensors) and softmax are not, so a partitioner has to
    leave them on the host.
    """

    def __init__(self, dim: int = 32, patch: int = 4, num_classes: int = 10):
        super().__init__()
        self.stem = nn.Conv2d(3, dim, patch, patch, bias=False)
        self.bn = nn.BatchNorm2d(dim)
        self.relu = nn.ReLU(inplace=True)
        self.norm = nn.LayerNorm(dim)
        # Separate projections, not one qkv Linear + chunk: the TorchScript ONNX exporter turns
        # chunk into Shape/Slice arithmetic, and TVM's ONNX import then loses the static
        # shapes of the attention matmuls (which the VM cannot lower).
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.proj = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, num_classes)
        self.scale = dim ** -0.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.bn(self.stem(x)))                  # (B, C, H, W)
        tokens = torch.flatten(x, 2).transpose(1, 2)          # (B, N, C)
        normed = self.norm(tokens)
        q, k, v = self.q(normed), self.k(normed), self.v(normed)
        attn = torch.softmax(torch.bmm(q, k.transpose(1, 2)) * self.scale, dim=-1)
        tokens = tokens + self.proj(torch.bmm(attn, v))
        return self.head(tokens.mean(dim=1))


def mixed_block(*, batch: int = 1, seed: int = 0) -> ModelAndInputs:
    """A small conv + self-attention model on a 3x32x32 input (64 tokens of width 32). Input
    (batch, 3, 32, 32); ``batch`` and ``seed`` as for :func:`get_model`."""
    return _build(MixedBlock, (3, 32, 32), batch, seed)


# --------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------
MODELS: dict[str, Callable[..., ModelAndInputs]] = {
    "lenet5": lenet5,
    "resnet18": resnet18,
    "resnet50": resnet50,
    "vgg11_bn": vgg11_bn,
    "mobilenet_v1": mobilenet_v1,
    "mixed_block": mixed_block,
}


def get_model(name: str, *, batch: int = 1, seed: int = 0) -> ModelAndInputs:
    """Build a zoo model by name.

    Parameters
    ----------
    name : str
        One of the keys of :data:`MODELS`.
    batch : int
        Batch size of the example input (a positive int).
    seed : int
        Seed of the weights and of the example input (a non-negative int); the same seed
        gives bit-identical weights and inputs.

    Returns
    -------
    tuple[torch.nn.Module, tuple[torch.Tensor, ...]]
        The model in eval mode with ``requires_grad`` off, and a tuple of example inputs
        drawn from N(0, 1).

    Raises
    ------
    AccelInvalidError
        If ``name`` is not a known model, or ``batch`` / ``seed`` are out of range.
    """
    try:
        factory = MODELS[name]
    except (KeyError, TypeError):
        raise AccelInvalidError(
            f"unknown model {name!r}; known models: {', '.join(sorted(MODELS))}") from None
    return factory(batch=batch, seed=seed)
