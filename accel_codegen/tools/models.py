"""A model zoo in plain PyTorch, for exercising the frontends and the offload flow.

Every model is built from a fixed seed (the same seed gives bit-identical weights and inputs
on any CPU: they are drawn by NumPy's generator, whose bits do not depend on the host, and
the batch-norm statistics are measured in float64, see :func:`_build`), put in eval mode, and initialised realistically, as after
training (:func:`_init_weights`, then :func:`_measure_batch_norm_statistics`):

* convolution and linear weights are drawn from N(0, 2 / fan_in) (He / Kaiming, fan-in
  mode), so activations keep a second moment of O(1) through deep ReLU stacks; biases
  are drawn from N(0, 0.1); a weight the architecture fixes (``requires_grad`` off:
  YOLOv8's DFL bin indices) is kept;
* batch-norm affine parameters are non-trivial (``weight ~ U(0.5, 1.5)``,
  ``bias ~ N(0, 0.1)``), so a frontend or backend that drops or mis-folds batch norm
  produces visibly wrong numbers; layer-norm affine parameters are randomised the same way;
  ConvNeXt's layer scales are drawn from U(0.1, 1) (a trained network's range, not the
  1e-6 its training starts from, which would make every block the identity); a
  transformer's class token, position embedding and relative position bias table from
  N(0, 0.1), ``nn.MultiheadAttention``'s fused in-projection as a linear layer's, and
  ConvNeXt-V2's GRN gamma and beta from N(0, 0.5) and N(0, 0.2) (zeros when training starts);
* batch-norm running statistics are those of the activations. They are measured in one
  forward pass in eval mode over :func:`calibration_input` (a batch of
  :data:`CALIBRATION_BATCH` N(0, 1) inputs of the example input's distribution, from a
  stream of its own), each batch norm's set from its input just before it runs, so that it
  normalises what it will see in eval mode to per-channel mean 0 and variance 1 (statistics
  accumulated in train mode would be measured on inputs that upstream batch norms had
  normalised with batch statistics instead);
* nothing is scaled to tame the activations: a residual branch adds its full variance.

Such random networks are chaotic (a perturbation of the input grows layer after layer), so
quantisation error on them is an upper bound of what trained weights see; absolute accuracy
is judged on a trained model (``examples/digits.py``).

The models follow the published architectures, the newer ones torchvision's module layout
and op order (state-dict keys included, parameter counts equal); the deliberate deviations
are VGG's classifier (see :func:`vgg11_bn`), GoogLeNet's (torchvision's: no auxiliary
classifiers, the "5x5" branch a 3x3 conv; :func:`googlenet`), AlexNet's conv1 padding for a
224x224 input (:func:`alexnet_lrn`) and EfficientNet's stochastic depth, left out (it is the
identity in eval mode). ``torch`` is imported at module level: this module is only imported
when the zoo is used, and ``accel_codegen/__init__.py`` does not import it.

Usage::

    from accel_codegen.models import get_model
    model, inputs = get_model("resnet18", batch=1, seed=0)
    logits = model(*inputs)
"""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from ..errors import AccelInvalidError

__all__ = ["MODELS", "ModelAndInputs", "get_model", "lenet5", "resnet18", "resnet50",
           "resnet50_caffe",
           "vgg11_bn", "mobilenet_v1", "mixed_block", "mobilenet_v2", "efficientnet_b0",
           "mobilenet_v3_small", "densenet121", "googlenet", "shufflenet_v2", "squeezenet1_1",
           "alexnet_lrn", "googlenet_lrn", "convnext_mini", "vit_ti16", "swin_mini", "encoder_stack",
           "hybrid_recogniser", "yolov8n", "CALIBRATION_BATCH", "calibration_input",
           "build_realistic"]

#: What every zoo function returns: the model in eval mode and its example inputs.
ModelAndInputs = tuple[nn.Module, tuple[torch.Tensor, ...]]

# Inputs and weights use separate streams, so changing the model never changes its inputs.
_INPUT_STREAM = 0x5EED
# The batch-norm calibration batch has a stream of its own too (see calibration_input).
_CALIBRATION_STREAM = 0xCA11B

#: Samples in the batch a model's batch-norm statistics are measured on.
CALIBRATION_BATCH = 4


# --------------------------------------------------------------------------------------
# Initialisation
# --------------------------------------------------------------------------------------
def _dims(shape) -> tuple:
    return (shape,) if isinstance(shape, int) else tuple(shape)


def _normal(gen: np.random.Generator, shape, std: float = 1.0) -> torch.Tensor:
    """N(0, std^2) samples as a float32 tensor. NumPy draws them and scales them in float64,
    rounding once: torch's own generator and arithmetic take vector paths chosen by the CPU
    (``ATEN_CPU_CAPABILITY``), whose bits differ from one CPU to another."""
    return torch.from_numpy((gen.standard_normal(_dims(shape)) * std).astype(np.float32))


def _uniform(gen: np.random.Generator, shape, low: float, high: float,
             log: bool = False) -> torch.Tensor:
    """U(low, high) samples (their natural logarithms with ``log``) as a float32 tensor, in
    float64 and rounded once, as :func:`_normal`'s."""
    x = gen.uniform(low, high, _dims(shape))
    return torch.from_numpy((np.log(x) if log else x).astype(np.float32))


def _init_weights(model: nn.Module, gen: np.random.Generator) -> None:
    """Overwrite every parameter of ``model`` from ``gen``, in module order (a conv or linear
    layer's weight then bias, a norm's weight then bias). Batch-norm running statistics are
    left to :func:`_measure_batch_norm_statistics`."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (nn.modules.conv._ConvNd, nn.Linear)):
                w = module.weight
                if not w.requires_grad:  # fixed by the architecture (YOLOv8's DFL bins)
                    continue
                fan_in = w[0].numel()  # in_channels / groups * kh * kw (out_channels for a
                # transposed conv, as torch counts it), or in_features
                w.copy_(_normal(gen, w.shape, math.sqrt(2.0 / fan_in)))
                if module.bias is not None:
                    module.bias.copy_(_normal(gen, module.bias.shape, 0.1))
            elif isinstance(module, nn.BatchNorm2d):
                c = module.num_features
                module.weight.copy_(_uniform(gen, c, 0.5, 1.5))
                module.bias.copy_(_normal(gen, c, 0.1))
            elif isinstance(module, (nn.LayerNorm, nn.GroupNorm)) and module.weight is not None:
                shape = module.weight.shape
                module.weight.copy_(_uniform(gen, shape, 0.5, 1.5))
                module.bias.copy_(_normal(gen, shape, 0.1))
            elif isinstance(module, nn.MultiheadAttention):  # its fused in-projection
                w = module.in_proj_weight
                w.copy_(_normal(gen, w.shape, math.sqrt(2.0 / w.shape[1])))
                module.in_proj_bias.copy_(_normal(gen, module.in_proj_bias.shape, 0.1))
            # ConvNeXt's layer scales (1e-6 at the start of training, 0.1 to 1 after it)
            if isinstance(getattr(module, "layer_scale", None), nn.Parameter):
                module.layer_scale.copy_(_uniform(gen, module.layer_scale.shape, 0.1, 1.0))
            # A transformer's learned tokens and tables (zeros or 0.02 at the start of
            # training, O(0.1) after it): class token, position embedding, relative
            # position bias
            # Swin-V2's logit scales per head (log 10 at the start of training; trained
            # heads spread from about 3 to 50)
            if isinstance(getattr(module, "logit_scale", None), nn.Parameter):
                module.logit_scale.copy_(_uniform(gen, module.logit_scale.shape, 3.0, 50.0, log=True))
            # ConvNeXt-V2's GRN gamma and beta (zeros at the start of training, so that the GRN
            # starts as the identity; O(0.1-1) after it)
            if isinstance(module, GRN):
                module.gamma.copy_(_normal(gen, module.gamma.shape, 0.5))
                module.beta.copy_(_normal(gen, module.beta.shape, 0.2))
            for name in ("cls_token", "pos_embed", "relative_position_bias_table"):
                table = getattr(module, name, None)
                if isinstance(table, nn.Parameter):
                    table.copy_(_normal(gen, table.shape, 0.1))


def calibration_input(input_shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """The batch a model's batch-norm statistics are measured on: N(0, 1), the
    example input's distribution, :data:`CALIBRATION_BATCH` samples of ``input_shape``
    (without the batch dimension), from its own stream of ``seed`` (so neither the example
    input nor the ``batch`` asked for changes the weights)."""
    return _normal(np.random.default_rng(seed ^ _CALIBRATION_STREAM),
                   (CALIBRATION_BATCH, *input_shape))


#: Threads of the batch-norm statistics pass (any fixed count gives the same weights every time).
STATISTICS_THREADS = 2


def _measure_batch_norm_statistics(model: nn.Module, x: torch.Tensor) -> None:
    """Set every batch norm's running statistics to those of its input in eval mode.

    One forward pass in eval mode over the calibration batch ``x``; just before each batch
    norm runs, a pre-hook sets its running mean and (biased) variance to the per-channel mean
    and variance of the tensor it is about to normalise. Modules run in data-flow order, so
    every batch norm upstream already normalises with its own measured statistics: each
    batch norm sees exactly the distribution it will see in eval mode, and its output over
    the calibration batch has per-channel mean 0 and variance var / (var + eps) ~ 1.

    (Statistics accumulated in train mode are measured while every upstream batch norm
    normalises with its batch's statistics instead; in eval mode the deeper layers then see
    a somewhat different distribution. This pass has no such mismatch.)
    """
    norms = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    if not norms:
        return
    seen: dict[int, int] = {}

    def measure(module: nn.BatchNorm2d, args: tuple) -> None:
        (inp,) = args
        var, mean = torch.var_mean(inp.double(), dim=(0, 2, 3), unbiased=False)
        module.running_mean.copy_(mean)
        module.running_var.copy_(var)
        module.num_batches_tracked.fill_(1)
        seen[id(module)] = seen.get(id(module), 0) + 1

    handles = [m.register_forward_pre_hook(measure) for m in norms]
    threads = torch.get_num_threads()
    try:
        model.eval()
        # A fixed thread count: a parallel reduction's order (and so the statistics' last
        # bits) would otherwise depend on the count the process happens to have set.
        torch.set_num_threads(STATISTICS_THREADS)
        with torch.no_grad():
            model(x)
    finally:
        torch.set_num_threads(threads)
        for handle in handles:
            handle.remove()
    missed = sum(1 for m in norms if seen.get(id(m)) != 1)
    if missed:  # a zoo bug: a norm that never runs, or runs twice with different inputs
        raise RuntimeError(f"{type(model).__name__}: {missed} batch norm(s) ran not exactly once "
                           "in the statistics pass")


def _build(factory: Callable[[], nn.Module], input_shape: tuple[int, ...], batch: int,
           seed: int) -> ModelAndInputs:
    """Construct, initialise (He weights, batch-norm statistics measured on
    :func:`calibration_input`) and freeze a model, and draw its example input.

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
        _init_weights(model, np.random.default_rng(seed))
        # in float64, so that the statistics' float32 values do not depend on the CPU's
        # convolution kernels (their summation orders differ between ISAs); the weights
        # round-trip exactly
        model.double()
        _measure_batch_norm_statistics(model, calibration_input(input_shape, seed).double())
        model.float()
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    x = _normal(np.random.default_rng(seed ^ _INPUT_STREAM), (batch, *input_shape))
    return model, (x,)


def build_realistic(factory: Callable[[], nn.Module], input_shape: tuple[int, ...], *,
                    batch: int = 1, seed: int = 0) -> ModelAndInputs:
    """Any model initialised as the zoo's are (He weights, batch-norm statistics measured on
    its own N(0, 1) batch), with its example input: for architectures outside the zoo."""
    return _build(factory, input_shape, batch, seed)


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
# ResNet (torchvision layout, "v1.5": the stride sits on the bottleneck's 3x3 conv; Caffe's
# "v1", resnet50_caffe, puts it on the first 1x1)
# --------------------------------------------------------------------------------------
class BasicBlock(nn.Module):
    """Two 3x3 conv-BN layers with an identity or 1x1-conv-BN shortcut."""

    expansion = 1

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
    #: The downsampling block's stride on its 1x1 reduce rather than its 3x3 (Caffe's original
    #: ResNet, "v1"; torchvision's "v1.5" strides the 3x3).
    stride_on_reduce = False

    def __init__(self, cin: int, width: int, stride: int = 1):
        super().__init__()
        cout = width * self.expansion
        reduce_stride, stride_3x3 = (stride, 1) if self.stride_on_reduce else (1, stride)
        self.conv1, self.bn1 = _conv_bn(cin, width, 1, reduce_stride)
        self.conv2, self.bn2 = _conv_bn(width, width, 3, stride_3x3)
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


class CaffeBottleneck(Bottleneck):
    """The bottleneck of He et al.'s Caffe model: the stride on the 1x1 reduce."""

    stride_on_reduce = True


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


def resnet50_caffe(*, batch: int = 1, seed: int = 0) -> ModelAndInputs:
    """ResNet-50 as He et al. published it in Caffe ("v1", the network of NVDLA's performance
    spreadsheet): :func:`resnet50` with each downsampling block's stride on its first 1x1
    convolution instead of its 3x3 (the same parameters, 3.86 instead of 4.09 GMACs: the 3x3
    runs at the lower resolution). Input (batch, 3, 224, 224); ``batch`` and ``seed`` as for
    :func:`get_model`."""
    return _build(lambda: ResNet(CaffeBottleneck, [3, 4, 6, 3]), (3, 224, 224), batch, seed)


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
# Shared blocks of the torchvision-layout models (torchvision.ops.misc)
# --------------------------------------------------------------------------------------
def _make_divisible(value: float, divisor: int = 8) -> int:
    """The channel rounding of the MobileNet family: the nearest multiple of ``divisor``, at
    least ``divisor``, never more than 10% below ``value``."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


class ConvNormActivation(nn.Sequential):
    """torchvision's ``Conv2dNormActivation``: conv (no bias, 'same' padding for odd kernels)
    [0], batch norm [1], and an in-place activation [2] unless ``activation`` is None."""

    def __init__(self, cin: int, cout: int, kernel: int = 3, stride: int = 1, groups: int = 1, *,
                 norm: Callable[[int], nn.Module] = nn.BatchNorm2d,
                 activation: Callable[..., nn.Module] | None = nn.ReLU):
        layers = [nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups,
                            bias=False), norm(cout)]
        if activation is not None:
            layers.append(activation(inplace=True))
        super().__init__(*layers)


class SqueezeExcitation(nn.Module):
    """torchvision's ``ops.SqueezeExcitation`` (Hu et al., 2018): global average pool, 1x1 conv
    down (``fc1``) + ``activation``, 1x1 conv up (``fc2``) + ``scale_activation``, then
    ``scale * input``."""

    def __init__(self, channels: int, squeeze: int, *,
                 activation: Callable[[], nn.Module] = nn.ReLU,
                 scale_activation: Callable[[], nn.Module] = nn.Sigmoid):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, channels, 1)
        self.activation = activation()
        self.scale_activation = scale_activation()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.fc2(self.activation(self.fc1(self.avgpool(x))))
        return self.scale_activation(scale) * x


# --------------------------------------------------------------------------------------
# MobileNet v2
# --------------------------------------------------------------------------------------
# (expansion t, output channels c, repeats n, first stride s), Sandler et al., 2018, table 2.
_MOBILENET_V2_SETTING = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                         (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


class InvertedResidual(nn.Module):
    """MobileNet v2's block: 1x1 expand + BN + ReLU6 (unless t = 1), 3x3 depthwise + BN +
    ReLU6, 1x1 linear projection + BN; ``x + self.conv(x)`` when the shapes allow."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int):
        super().__init__()
        hidden = cin * expand
        self.use_res_connect = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if expand != 1:
            layers.append(ConvNormActivation(cin, hidden, 1, activation=nn.ReLU6))
        layers += [ConvNormActivation(hidden, hidden, 3, stride, groups=hidden,
                                      activation=nn.ReLU6),
                   nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


class MobileNetV2(nn.Module):
    """MobileNet v2 (Sandler et al., 2018), width 1.0, torchvision module layout."""

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        layers: list[nn.Module] = [ConvNormActivation(3, 32, 3, 2, activation=nn.ReLU6)]
        cin = 32
        for expand, cout, repeats, stride in _MOBILENET_V2_SETTING:
            for i in range(repeats):
                layers.append(InvertedResidual(cin, cout, stride if i == 0 else 1, expand))
                cin = cout
        layers.append(ConvNormActivation(cin, 1280, 1, activation=nn.ReLU6))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(x, 1))


def mobilenet_v2(*, batch: int = 1, seed: int = 0) -> ModelAndInputs:
    """MobileNet v2, width 1.0, on a 3x224x224 input, 1000 classes: 17 inverted residual blocks
    (10 with the residual add), ReLU6, a 1280-channel last conv; 3.5 M parameters. Realistic
    initialisation. Input (batch, 3, 224, 224); ``batch`` and ``seed`` as for
    :func:`get_model`."""
    return _build(MobileNetV2, (3, 224, 224), batch, seed)


# --------------------------------------------------------------------------------------
# EfficientNet-B0
# --------------------------------------------------------------------------------------
# (expansion, kernel, first stride, input channels, output channels, repeats), Tan & Le, 2019,
# table 1 (width and depth multipliers 1.0).
_EFFICIENTNET_B0_SETTING = ((1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2),
                            (6, 3, 2, 40, 80, 3), (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4),
                            (6, 3, 1, 192, 320, 1))


class MBConv(nn.Module):
    """EfficientNet's MBConv: 1x1 expand + BN + SiLU (unless the ratio is 1), kxk depthwise +
    BN + SiLU, squeeze-excite (squeeze to input channels / 4, SiLU, sigmoid), 1x1 projection
    + BN; ``block(x) + x`` when the shapes allow (stochastic depth, the identity in eval
    mode, is left out)."""

    def __init__(self, expand: int, kernel: int, stride: int, cin: int, cout: int):
        super().__init__()
        self.use_res_connect = stride == 1 and cin == cout
        hidden = _make_divisible(cin * expand)
        layers: list[nn.Module] = []
        if hidden != cin:
            layers.append(ConvNormActivation(cin, hidden, 1, activation=nn.SiLU))
        layers += [
            ConvNormActivation(hidden, hidden, kernel, stride, groups=hidden, activation=nn.SiLU),
            SqueezeExcitation(hidden, max(1, cin // 4), activation=lambda: nn.SiLU(inplace=True)),
            ConvNormActivation(hidden, cout, 1, activation=None),
        ]
        self.block = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result = self.block(x)
        return result + x if self.use_res_connect else result


class EfficientNet(nn.Module):
    """EfficientNet-B0 (Tan & Le, 2019), torchvision module layout."""

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        layers: list[nn.Module] = [ConvNormActivation(3, 32, 3, 2, activation=nn.SiLU)]
        for expand, kernel, stride, cin, cout, repeats in _EFFICIENTNET_B0_SETTING:
            layers.append(nn.Sequential(*(
                MBConv(expand, kernel, stride if i == 0 else 1, cin if i == 0 else cout, cout)
                for i in range(repeats))))
        layers.append(ConvNormActivation(320, 1280, 1, activation=nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(0.2, inplace=True),
                                        nn.Linear(1280, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def efficientnet_b0(*, batch: int = 1, seed: int = 0) -> ModelAndInputs:
    """EfficientNet-B0 on a 3x224x224 input, 1000 classes: a 3x3/2 stem, 16 MBConv blocks
    with SiLU and squeeze-excite, a 1280-channel last conv; 5.3 M parameters. Realistic
    initialisation. Input (batch, 3, 224, 224); ``batch`` and ``seed`` as for
    :func:`get_model`."""
    return _build(EfficientNet, (3, 224, 224), batch, seed)


# --------------------------------------------------------------------------------------
# MobileNet v3 small
# --------------------------------------------------------------------------------------
# (input, kernel, expanded, output, squeeze-excite, hardswish, stride), Howard et al., 2019,
# table 2.
_MOBILENET_V3_SMALL_SETTING = (
    (16, 3, 16, 16, True, False, 2), (16, 3, 72, 24, False, False, 2),
    (24, 3, 88, 24, False, False, 1), (24, 5, 96, 40, True, True, 2),
    (40, 5, 240, 40, True, True, 1), (40, 5, 240, 40, True, True, 1),
    (40, 5, 120, 48, True, True, 1), (48, 5, 144, 48, True, True, 1),
    (48, 5, 288, 96, True, True, 2), (96, 5, 576, 96, True, True, 1),
    (96, 5, 576, 96, True, True, 1))


def _mobilenet_v3_norm(channels: int) -> nn.BatchNorm2d:
    """MobileNet v3's batch norm (torchvision: eps 1e-3, momentum 0.01)."""
    return nn.BatchNorm2d(channels, eps=0.001, momentum=0.01)


class InvertedResidualV3(nn.Module):
    """MobileNet v3's block: 1x1 expand (unless expanded = input), kxk depthwise, optional
    squeeze-excite (ReLU, hardsigmoid), 1x1 projection + BN; ReLU or hardswish; ``block(x) +
    x`` when the shapes allow."""

    def __init__(self, cin: int, kernel: int, expanded: int, cout: int, use_se: bool,
                 use_hs: bool, stride: int):
        super().__init__()
        self.use_res_connect = stride == 1 and cin == cout
        act = nn.Hardswish if use_hs else nn.ReLU
        layers: list[nn.Module] = []
        if expanded != cin:
            layers.append(ConvNormActivation(cin, expanded, 1, norm=_mobilenet_v3_norm,
                                             activation=act))
        layers.append(ConvNormActivation(expanded, expanded, kernel, stride, groups=expanded,
                                         norm=_mobilenet_v3_norm, activation=act))
        if use_se:
            layers.append(SqueezeExcitation(expanded, _make_divisible(expanded // 4),
                                            scale_activation=nn.Hardsigmoid))
        layers.append(ConvNormActivation(expanded, cout, 1, norm=_mobilenet_v3_norm,
                                         activation=None))
        self.block = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result = self.block(x)
        return result + x if self.use_res_connect else result


class MobileNetV3Small(nn.Module):
    """MobileNet v3 small (Howard et al., 2019), width 1.0, torchvision module layout."""

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        layers: list[nn.Module] = [ConvNormActivation(3, 16, 3, 2, norm=_mobilenet_v3_norm,
                                                      activation=nn.Hardswish)]
        layers += [InvertedResidualV3(*setting) for setting in _MOBILENET_V3_SMALL_SETTING]
        layers.append(ConvNormActivation(96, 576, 1, norm=_mobilenet_v3_norm,
                                         activation=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Linear(576, 1024), nn.Hardswish(inplace=True),
                                        nn.Dropout(0.2, inplace=True),
                                        nn.Linear(1024, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def mobilenet_v3_small(*, batch: int = 1, seed: int = 0) -> ModelAndInputs:
    """MobileNet v3 small on a 3x224x224 input, 1000 classes: hardswish and ReLU, 11 inverted
    residual blocks (9 with hardsigmoid squeeze-excite), a 576-channel last conv and a
    1024-unit hidden layer; 2.5 M parameters. Realistic initialisation. Input (batch, 3,
    224, 224); ``batch`` and ``seed`` as for :func:`get_model`."""
    return _build(MobileNetV3Small, (3, 224, 224), batch, seed)


# --------------------------------------------------------------------------------------
# DenseNet-121
# --------------------------------------------------------------------------------------
class DenseLayer(nn.Module):
    """BN + ReLU + 1x1 conv (bn_size x growth channels), BN + ReLU + 3x3 conv (growth
    channels), on the concatenation of every earlier feature map of the block."""

    def __init__(self, cin: int, growth: int, bn_size: int):
        super().__init__()
        self.norm1 = nn.BatchNorm2d(cin)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(cin, bn_size * growth, 1, bias=False)
        self.norm2 = nn.BatchNorm2d(bn_size * growth)
        self.relu2 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(bn_size * growth, growth, 3, padding=1, bias=False)

    def forward(self, features: list[torch.Tensor]) -> torch.Tensor:
        x = torch.cat(features, 1)
        return self.conv2(self.relu2(self.norm2(self.conv1(self.relu1(self.norm1(x))))))


class DenseBlock(nn.ModuleDict):
    """``layers`` dense layers; each reads the concatenation of the block input and every
    earlier layer's output; the block returns the concatenation of all of them."""

    def __init__(self, layers: int, cin: int, growth: int, bn_size: int):
        super().__init__({f"denselayer{i + 1}": DenseLayer(cin + i * growth, growth, bn_size)
                          for i in range(layers)})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = [x]
        for layer in self.values():
            features.append(layer(features))
        return torch.cat(features, 1)


class Transition(nn.Sequential):
    """BN + ReLU + 1x1 conv (halving the channels) + 2x2/2 average pool."""

    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.add_module("norm", nn.BatchNorm2d(cin))
        self.add_module("relu", nn.ReLU(inplace=True))
        self.add_module("conv", nn.Conv2d(cin, cout, 1, bias=False))
        self.add_module("pool", nn.AvgPool2d(2, 2))


class DenseNet(nn.Module):
    """DenseNet-BC (Huang et al., 2017) for 224x224 ImageNet inputs, torchvision layout."""

    def __init__(self, growth: int = 32, blocks: tuple[int, ...] = (6, 12, 24, 16),
                 init_features: int = 64, bn_size: int = 4, num_classes: int = 1000):
        super().__init__()
        self.features = nn.Sequential()
        self.features.add_module("conv0", nn.Conv2d(3, init_features, 7, 2, 3, bias=False))
        self.features.add_module("norm0", nn.BatchNorm2d(init_features))
        self.features.add_module("relu0", nn.ReLU(inplace=True))
        self.features.add_module("pool0", nn.MaxPool2d(3, 2, 1))
        channels = init_features
        for i, layers in enumerate(blocks):
            self.features.add_module(f"denseblock{i + 1}",
                                     DenseBlock(layers, channels, growth, bn_size))
            channels += layers * growth
            if i != len(blocks) - 1:
                self.features.add_module(f"transition{i + 1}", Transition(channels, channels // 2))
                channels //= 2
        self.features.add_module("norm5", nn.BatchNorm2d(channels))
        self.classifier = nn.Linear(channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = nn.functional.relu(self.features(x), inplace=True)
        out = nn.functional.adaptive_avg_pool2d(out, (1, 1))
        return self.classifier(torch.flatten(out, 1))


def densenet121(*, batch: int = 1, seed: int = 0) -> ModelAndInputs:
    """DenseNet-121 on a 3x224x224 input, 1000 classes: the full published network (growth
    rate 32, blocks of 6, 12, 24 and 16 dense layers with 4 x 32-channel bottlenecks,
    compression 0.5 in the transitions, 1024 channels at the end); 8.0 M parameters.
    Realistic initialisation. Input (batch, 3, 224, 224); ``batch`` and ``seed`` as for
    :func:`get_model`."""
    return _build(DenseNet, (3, 224, 224), batch, seed)


# --------------------------------------------------------------------------------------
# GoogLeNet (Inception v1)
# --------------------------------------------------------------------------------------
class BasicConv2d(nn.Module):
    """conv (no bias) + BN (eps 1e-3) + ReLU, torchvision's GoogLeNet unit."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int = 1, padding: int = 0):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel, stride, padding, bias=False)
        self.bn = nn.BatchNorm2d(cout, eps=0.001)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.relu(self.bn(self.conv(x)), inplace=True)


class Inception(nn.Module):
    """Inception v1 module: 1x1; 1x1 -> 3x3; 1x1 -> "5x5"; 3x3/1 ceil-mode max pool -> 1x1;
    the four concatenated. ``conv`` is the unit (torchvision's conv + BN + ReLU by default) and
    ``wide`` the "5x5" branch's kernel (3, as torchvision has it, by default)."""

    def __init__(self, cin: int, ch1x1: int, ch3x3red: int, ch3x3: int, ch5x5red: int,
                 ch5x5: int, pool_proj: int, *, conv: type = BasicConv2d, wide: int = 3):
        super().__init__()
        self.branch1 = conv(cin, ch1x1, 1)
        self.branch2 = nn.Sequential(conv(cin, ch3x3red, 1), conv(ch3x3red, ch3x3, 3, padding=1))
        self.branch3 = nn.Sequential(conv(cin, ch5x5red, 1),
                                     conv(ch5x5red, ch5x5, wide, padding=wide // 2))
        self.branch4 = nn.Sequential(nn.MaxPool2d(3, 1, 1, ceil_mode=True),
                                     conv(cin, pool_proj, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.branch1(x), self.branch2(x), self.branch3(x), self.branch4(x)], 1)


class GoogLeNet(nn.Module):
    """GoogLeNet (Szegedy et al., 2015) as torchvision's ``GoogLeNet(aux_logits=False,
    transform_input=False)``: batch norm after every conv, ceil-mode max pools."""

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        self.conv1 = BasicConv2d(3, 64, 7, 2, 3)
        self.maxpool1 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv2 = BasicConv2d(64, 64, 1)
        self.conv3 = BasicConv2d(64, 192, 3, padding=1)
        self.maxpool2 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.inception3a = Inception(192, 64, 96, 128, 16, 32, 32)
        self.inception3b = Inception(256, 128, 128, 192, 32, 96, 64)
        self.maxpool3 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.inception4a = Inception(480, 192, 96, 208, 16, 48, 64)
        self.inception4b = Inception(512, 160, 112, 224, 24, 64, 64)
        self.inception4c = Inception(512, 128, 128, 256, 24, 64, 64)
        self.inception4d = Inception(512, 112, 144, 288, 32, 64, 64)
        self.inception4e = Inception(528, 256, 160, 320, 32, 128, 128)
        self.maxpool4 = nn.MaxPool2d(2, 2, ceil_mode=True)
        self.inception5a = Inception(832, 256, 160, 320, 32, 128, 128)
        self.inception5b = Inception(832, 384, 192, 384, 48, 128, 128)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.dropout = nn.Dropout(0.2)
        self.fc = nn.Linear(1024, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool1(self.conv1(x))
        x = self.maxpool2(self.conv3(self.conv2(x)))
        x = self.maxpool3(self.inception3b(self.inception3a(x)))
        x = self.inception4c(self.inception4b(self.inception4a(x)))
        x = self.maxpool4(self.inception4e(self.inception4d(x)))
        x = self.inception5b(self.inception5a(x))
        return self.fc(self.dropout(torch.flatten(self.avgpool(x), 1)))


def googlenet(*, batch: int = 1, seed: int = 0) -> ModelAndInputs:
    """GoogLeNet on a 3x224x224 input, 1000 classes: nine Inception modules, conv + BN + ReLU
    units, ceil-mode max pools; 6.6 M parameters. As torchvision builds it: the auxiliary
    classifiers (training only) are left out, and the "5x5" branch is a 3x3 conv. Realistic
    initialisation. Input (batch, 3, 224, 224); ``batch`` and ``seed`` as for
    :func:`get_model`."""
    return _build(GoogLeNet, (3, 224, 224), batch, seed)


# --------------------------------------------------------------------------------------
# ShuffleNet v2 x1.0
# --------------------------------------------------------------------------------------
def _channel_shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    """(B, g * c, H, W) -> view (B, g, c, H, W) -> transpose 1, 2 -> (B, c * g, H, W)."""
    b, channels, h, w = x.size()
    x = x.view(b, groups, channels // groups, h, w)
    return torch.transpose(x, 1, 2).contiguous().view(b, -1, h, w)


class ShuffleUnit(nn.Module):
    """ShuffleNet v2's unit. Stride 1: split the channels in two (``chunk``), one half through
    1x1 + BN + ReLU, 3x3 depthwise + BN, 1x1 + BN + ReLU, concatenated with the other half.
    Stride 2: both branches see the whole input (``branch1``: 3x3/2 depthwise + BN, 1x1 + BN
    + ReLU). Then a channel shuffle with 2 groups."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.stride = stride
        half = cout // 2

        def depthwise(channels: int) -> nn.Conv2d:
            return nn.Conv2d(channels, channels, 3, stride, 1, groups=channels, bias=False)

        if stride > 1:
            self.branch1 = nn.Sequential(
                depthwise(cin), nn.BatchNorm2d(cin),
                nn.Conv2d(cin, half, 1, bias=False), nn.BatchNorm2d(half), nn.ReLU(inplace=True))
        else:
            self.branch1 = nn.Sequential()
        self.branch2 = nn.Sequential(
            nn.Conv2d(cin if stride > 1 else half, half, 1, bias=False), nn.BatchNorm2d(half),
            nn.ReLU(inplace=True),
            depthwise(half), nn.BatchNorm2d(half),
            nn.Conv2d(half, half, 1, bias=False), nn.BatchNorm2d(half), nn.ReLU(inplace=True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return _channel_shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    """ShuffleNet v2 (Ma et al., 2018), torchvision module layout."""

    def __init__(self, repeats: tuple[int, ...] = (4, 8, 4),
                 channels: tuple[int, ...] = (24, 116, 232, 464, 1024), num_classes: int = 1000):
        super().__init__()
        self.conv1 = nn.Sequential(nn.Conv2d(3, channels[0], 3, 2, 1, bias=False),
                                   nn.BatchNorm2d(channels[0]), nn.ReLU(inplace=True))
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        cin = channels[0]
        for name, n, cout in zip(("stage2", "stage3", "stage4"), repeats, channels[1:]):
            setattr(self, name, nn.Sequential(
                ShuffleUnit(cin, cout, 2), *(ShuffleUnit(cout, cout, 1) for _ in range(n - 1))))
            cin = cout
        self.conv5 = nn.Sequential(nn.Conv2d(cin, channels[-1], 1, bias=False),
                                   nn.BatchNorm2d(channels[-1]), nn.ReLU(inplace=True))
        self.fc = nn.Linear(channels[-1], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.conv1(x))
        x = self.conv5(self.stage4(self.stage3(self.stage2(x))))
        return self.fc(x.mean([2, 3]))


def shufflenet_v2(*, batch: int = 1, seed: int = 0) -> ModelAndInputs:
    """ShuffleNet v2 x1.0 on a 3x224x224 input, 1000 classes: stages of 4, 8 and 4 units (116,
    232, 464 channels), channel split (``chunk``), concatenation and channel shuffle; 2.3 M
    parameters. Realistic initialisation. Input (batch, 3, 224, 224); ``batch`` and ``seed``
    as for :func:`get_model`."""
    return _build(ShuffleNetV2, (3, 224, 224), batch, seed)


# --------------------------------------------------------------------------------------
# SqueezeNet 1.1
# --------------------------------------------------------------------------------------
class Fire(nn.Module):
    """1x1 squeeze + ReLU, then 1x1 and 3x3 expands (each + ReLU), concatenated."""

    def __init__(self, cin: int, squeeze: int, expand1x1: int, expand3x3: int):
        super().__init__()
        self.squeeze = nn.Conv2d(cin, squeeze, 1)
        self.squeeze_activation = nn.ReLU(inplace=True)
        self.expand1x1 = nn.Conv2d(squeeze, expand1x1, 1)
        self.expand1x1_activation = nn.ReLU(inplace=True)
        self.expand3x3 = nn.Conv2d(squeeze, expand3x3, 3, padding=1)
        self.expand3x3_activation = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.squeeze_activation(self.squeeze(x))
        return torch.cat([self.expand1x1_activation(self.expand1x1(x)),
                          self.expand3x3_activation(self.expand3x3(x))], 1)


class SqueezeNet(nn.Module):
    """SqueezeNet 1.1 (Iandola et al., 2016; the v1.1 of the authors' repository), torchvision
    module layout: no batch norm, ceil-mode max pools, a conv classifier."""

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, 3, 2), nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(64, 16, 64, 64), Fire(128, 16, 64, 64),
            nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(128, 32, 128, 128), Fire(256, 32, 128, 128),
            nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(256, 48, 192, 192), Fire(384, 48, 192, 192),
            Fire(384, 64, 256, 256), Fire(512, 64, 256, 256))
        self.classifier = nn.Sequential(nn.Dropout(0.5), nn.Conv2d(512, num_classes, 1),
                                        nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d((1, 1)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(self.classifier(self.features(x)), 1)


def squeezenet1_1(*, batch: int = 1, seed: int = 0) -> ModelAndInputs:
    """SqueezeNet 1.1 on a 3x224x224 input, 1000 classes: eight Fire modules (squeeze, two
    expands, concatenation), conv with bias + ReLU throughout; 1.2 M parameters. Realistic
    initialisation (He weights; it has no batch norm). Input (batch, 3, 224, 224); ``batch``
    and ``seed`` as for :func:`get_model`."""
    return _build(SqueezeNet, (3, 224, 224), batch, seed)


# --------------------------------------------------------------------------------------
# AlexNet with local response normalisation
# --------------------------------------------------------------------------------------
class AlexNetLRN(nn.Module):
    """The original AlexNet (Krizhevsky et al., 2012) as Caffe's bvlc_alexnet runs it on one
    device: 96-256-384-384-256 conv channels, the paper's two-GPU split kept as groups = 2 on
    conv2, conv4 and conv5, ReLU then local response normalisation then 3x3/2 max pooling
    after conv1 and conv2, two 4096-unit hidden layers with ReLU and dropout."""

    def __init__(self, num_classes: int = 1000):
        super().__init__()

        def lrn() -> nn.LocalResponseNorm:
            # The paper's k = 2, n = 5, alpha = 1e-4, beta = 0.75; torch divides alpha by n.
            return nn.LocalResponseNorm(5, alpha=5e-4, beta=0.75, k=2.0)

        self.features = nn.Sequential(
            nn.Conv2d(3, 96, 11, 4, 2), nn.ReLU(inplace=True), lrn(), nn.MaxPool2d(3, 2),
            nn.Conv2d(96, 256, 5, padding=2, groups=2), nn.ReLU(inplace=True), lrn(),
            nn.MaxPool2d(3, 2),
            nn.Conv2d(256, 384, 3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(384, 384, 3, padding=1, groups=2), nn.ReLU(inplace=True),
            nn.Conv2d(384, 256, 3, padding=1, groups=2), nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2))
        self.classifier = nn.Sequential(
            nn.Linear(256 * 6 * 6, 4096), nn.ReLU(inplace=True), nn.Dropout(),
            nn.Linear(4096, 4096), nn.ReLU(inplace=True), nn.Dropout(),
            nn.Linear(4096, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))


def alexnet_lrn(*, batch: int = 1, seed: int = 0) -> ModelAndInputs:
    """The original AlexNet with local response normalisation on a 3x224x224 input, 1000
    classes; 61 M parameters (244 MB). conv1 pads by 2 so that 224 gives the published 55x55
    (Caffe feeds 227 without padding: same shapes from there on). Realistic initialisation
    (He weights; it has no batch norm). Input (batch, 3, 224, 224); ``batch`` and ``seed``
    as for :func:`get_model`."""
    return _build(AlexNetLRN, (3, 224, 224), batch, seed)


# --------------------------------------------------------------------------------------
# GoogLeNet as BVLC's Caffe model: local response normalisation, 5x5 convolutions, biases
# --------------------------------------------------------------------------------------
class ConvReLU(nn.Sequential):
    """conv (with bias) + ReLU, the Caffe GoogLeNet unit."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int = 1, padding: int = 0):
        super().__init__(nn.Conv2d(cin, cout, kernel, stride, padding), nn.ReLU(inplace=True))


class InceptionLRN(Inception):
    """The original Inception v1 module: conv (with bias) + ReLU units and a real 5x5."""

    def __init__(self, *channels: int):
        super().__init__(*channels, conv=ConvReLU, wide=5)


class GoogLeNetLRN(nn.Module):
    """GoogLeNet (Szegedy et al., 2015) as BVLC's Caffe bvlc_googlenet deploys it: no batch
    norm; local response normalisation after the stem's first pool and after conv2; real 5x5
    branches; ceil-mode 3x3/2 max pools (pool4 too); 7x7 average pool; dropout 0.4."""

    def __init__(self, num_classes: int = 1000):
        super().__init__()

        def lrn() -> nn.LocalResponseNorm:
            # Caffe's local_size 5, alpha 1e-4, beta 0.75, k 1; Caffe also divides alpha by n.
            return nn.LocalResponseNorm(5, alpha=1e-4, beta=0.75, k=1.0)

        self.stem = nn.Sequential(
            ConvReLU(3, 64, 7, 2, 3), nn.MaxPool2d(3, 2, ceil_mode=True), lrn(),
            ConvReLU(64, 64, 1), ConvReLU(64, 192, 3, padding=1), lrn(),
            nn.MaxPool2d(3, 2, ceil_mode=True))
        self.inception3 = nn.Sequential(InceptionLRN(192, 64, 96, 128, 16, 32, 32),
                                        InceptionLRN(256, 128, 128, 192, 32, 96, 64),
                                        nn.MaxPool2d(3, 2, ceil_mode=True))
        self.inception4 = nn.Sequential(InceptionLRN(480, 192, 96, 208, 16, 48, 64),
                                        InceptionLRN(512, 160, 112, 224, 24, 64, 64),
                                        InceptionLRN(512, 128, 128, 256, 24, 64, 64),
                                        InceptionLRN(512, 112, 144, 288, 32, 64, 64),
                                        InceptionLRN(528, 256, 160, 320, 32, 128, 128),
                                        nn.MaxPool2d(3, 2, ceil_mode=True))
        self.inception5 = nn.Sequential(InceptionLRN(832, 256, 160, 320, 32, 128, 128),
                                        InceptionLRN(832, 384, 192, 384, 48, 128, 128))
        self.avgpool = nn.AvgPool2d(7, 1)
        self.dropout = nn.Dropout(0.4)
        self.fc = nn.Linear(1024, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inception5(self.inception4(self.inception3(self.stem(x))))
        return self.fc(self.dropout(torch.flatten(self.avgpool(x), 1)))


def googlenet_lrn(*, batch: int = 1, seed: int = 0) -> ModelAndInputs:
    """The original GoogLeNet (BVLC's Caffe model) with local response normalisation on a
    3x224x224 input, 1000 classes; 7.0 M parameters. Realistic initialisation (He weights; it
    has no batch norm). Input (batch, 3, 224, 224); ``batch`` and ``seed`` as for
    :func:`get_model`."""
    return _build(GoogLeNetLRN, (3, 224, 224), batch, seed)


# --------------------------------------------------------------------------------------
# ConvNeXt (Liu et al., 2022): a CNN with layer norm, 7x7 depthwise convs and GELU
# --------------------------------------------------------------------------------------
class Permute(nn.Module):
    """torchvision's ``ops.misc.Permute``."""

    def __init__(self, dims: list[int]):
        super().__init__()
        self.dims = dims

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.permute(x, self.dims)


class LayerNorm2d(nn.LayerNorm):
    """torchvision's ConvNeXt ``LayerNorm2d``: a layer norm over the channels of NCHW data,
    through channels-last."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.permute(0, 2, 3, 1)
        x = nn.functional.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


class CNBlock(nn.Module):
    """torchvision's ConvNeXt block: 7x7 depthwise conv, permute to channels-last, layer norm
    over C, Linear 4C, GELU, Linear C, permute back, layer scale, residual add (stochastic
    depth is the identity in eval mode and left out). ``approximate``: GELU's form ("none":
    erf, torchvision's; "tanh")."""

    def __init__(self, dim: int, approximate: str = "none"):
        super().__init__()
        self.block = nn.Sequential(
            nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim, bias=True),
            Permute([0, 2, 3, 1]),
            nn.LayerNorm(dim, eps=1e-6),
            nn.Linear(dim, 4 * dim, bias=True),
            nn.GELU(approximate=approximate),
            nn.Linear(4 * dim, dim, bias=True),
            Permute([0, 3, 1, 2]),
        )
        self.layer_scale = nn.Parameter(torch.full((dim, 1, 1), 1e-6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer_scale * self.block(x) + x


class GRN(nn.Module):
    """ConvNeXt-V2's global response normalisation over channels-last [N, H, W, C] data, as
    its authors wrote it: the L2 norm of each channel over H and W, divided by the mean of
    those norms over the channels, then ``gamma * (x * nx) + beta + x``."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.gamma = nn.Parameter(torch.zeros(1, 1, 1, dim))
        self.beta = nn.Parameter(torch.zeros(1, 1, 1, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gx = torch.norm(x, p=2, dim=(1, 2), keepdim=True)
        nx = gx / (gx.mean(dim=-1, keepdim=True) + self.eps)
        return self.gamma * (x * nx) + self.beta + x


class CNv2Block(nn.Module):
    """ConvNeXt-V2's block: 7x7 depthwise conv, permute to channels-last, layer norm over C,
    Linear 4C, GELU, GRN(4C), Linear C, permute back, residual add (no layer scale: GRN
    replaced it; stochastic depth is the identity in eval mode and left out)."""

    def __init__(self, dim: int):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.grn = GRN(4 * dim)
        self.pwconv2 = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dwconv(x).permute(0, 2, 3, 1)
        y = self.pwconv2(self.grn(self.act(self.pwconv1(self.norm(y)))))
        return x + y.permute(0, 3, 1, 2)


class ConvNeXt(nn.Module):
    """ConvNeXt in torchvision's module layout: a 4x4/4 conv + LayerNorm2d stem, stages of
    CNBlocks with LayerNorm2d + 2x2/2 conv between them, then global average pool,
    LayerNorm2d, flatten and a Linear head."""

    def __init__(self, depths: list[int], dims: list[int], num_classes: int = 1000,
                 approximate: str = "none"):
        super().__init__()
        layers: list[nn.Module] = [nn.Sequential(nn.Conv2d(3, dims[0], 4, 4),
                                                 LayerNorm2d(dims[0], eps=1e-6))]
        for i, (depth, dim) in enumerate(zip(depths, dims)):
            layers.append(nn.Sequential(*(CNBlock(dim, approximate) for _ in range(depth))))
            if i + 1 < len(dims):
                layers.append(nn.Sequential(LayerNorm2d(dim, eps=1e-6),
                                            nn.Conv2d(dim, dims[i + 1], 2, 2)))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(LayerNorm2d(dims[-1], eps=1e-6), nn.Flatten(1),
                                        nn.Linear(dims[-1], num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.avgpool(self.features(x)))


def convnext_mini(*, batch: int = 1, seed: int = 0) -> ModelAndInputs:
    """A ConvNeXt-T-like model, small enough for tests: ConvNeXt-T's layout (torchvision's
    modules, stem, downsampling and head; GELU in its erf form) with stages of [2, 2, 4, 2]
    blocks of widths [32, 64, 128, 256] (ConvNeXt-T: [3, 3, 9, 3] of [96, 192, 384, 768]) on a
    3x64x64 input, 100 classes. Realistic initialisation (He weights, layer norms and layer
    scales randomised: :func:`_init_weights`). Input (batch, 3, 64, 64); ``batch`` and
    ``seed`` as for :func:`get_model`."""
    return _build(lambda: ConvNeXt([2, 2, 4, 2], [32, 64, 128, 256], num_classes=100),
                  (3, 64, 64), batch, seed)


# --------------------------------------------------------------------------------------
# Transformers: ViT, Swin, nn.TransformerEncoderLayer, a conv + transformer hybrid
# --------------------------------------------------------------------------------------
class Attention(nn.Module):
    """Multi-head self-attention as timm's ViT writes it: one qkv Linear, the heads split by
    reshape + permute, softmax(q k^T / sqrt(d)) v, the heads merged, a projection."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = ((q @ k.transpose(-2, -1)) * self.scale).softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(b, n, c))


class Mlp(nn.Sequential):
    """Linear, GELU, Linear (timm's ``Mlp``)."""

    def __init__(self, dim: int, hidden: int):
        super().__init__(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))


class EncoderBlock(nn.Module):
    """A pre-norm transformer block: x + attn(norm1(x)), then x + mlp(norm2(x))."""

    def __init__(self, dim: int, heads: int, mlp_ratio: int = 4):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, mlp_ratio * dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class VisionTransformer(nn.Module):
    """ViT (Dosovitskiy et al., 2021) as timm writes it: a patch-embedding strided conv, the
    tokens flattened channels-last, a class token concatenated before them, a position
    embedding added, pre-norm encoder blocks, a final layer norm, the class token's head."""

    def __init__(self, image: int = 224, patch: int = 16, dim: int = 192, depth: int = 12,
                 heads: int = 3, num_classes: int = 1000):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch, patch)
        tokens = (image // patch) ** 2
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, tokens + 1, dim))
        self.blocks = nn.Sequential(*(EncoderBlock(dim, heads) for _ in range(depth)))
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        return self.head(self.norm(self.blocks(x))[:, 0])


def vit_ti16(*, batch: int = 1, seed: int = 0) -> ModelAndInputs:
    """ViT-Ti/16 (DeiT-Ti's size: width 192, 12 blocks of 3 heads, MLP 768, 197 tokens) on a
    3x224x224 input, 1000 classes; 5.7 M parameters. Realistic initialisation (He weights,
    layer norms randomised, class token and position embedding N(0, 0.1)). Input (batch, 3,
    224, 224); ``batch`` and ``seed`` as for :func:`get_model`."""
    return _build(VisionTransformer, (3, 224, 224), batch, seed)


class WindowAttention(nn.Module):
    """Swin's (shifted) window attention as torchvision writes it, on [B, H, W, C]: a cyclic
    shift (``roll``), the windows cut out by view + permute, attention in each window with a
    relative position bias (a table gathered by a constant index) and, for shifted windows,
    the mask that keeps regions apart; the windows put back, the shift undone."""

    def __init__(self, dim: int, heads: int, window: int, shift: int, size: int):
        super().__init__()
        self.heads, self.window, self.shift = heads, window, shift
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.relative_position_bias_table = nn.Parameter(
            torch.zeros((2 * window - 1) ** 2, heads))
        coords = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window),
                                            indexing="ij")).flatten(1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + (window - 1)
        self.register_buffer("relative_position_index",
                             (rel[..., 0] * (2 * window - 1) + rel[..., 1]).flatten(),
                             persistent=False)
        mask = torch.zeros(0)
        if shift:  # torchvision's: regions of the shifted image that must not attend
            regions = torch.zeros(size, size)
            bounds = (0, size - window, size - shift, size)
            label = 0
            for h0, h1 in zip(bounds[:-1], bounds[1:]):
                for w0, w1 in zip(bounds[:-1], bounds[1:]):
                    regions[h0:h1, w0:w1] = label
                    label += 1
            windows = regions.view(size // window, window, size // window, window)
            windows = windows.permute(0, 2, 1, 3).reshape(-1, window * window)
            diff = windows[:, None, :] - windows[:, :, None]
            mask = torch.where(diff != 0, -100.0, 0.0)
        self.register_buffer("mask", mask, persistent=False)

    def _projected(self, x: torch.Tensor) -> torch.Tensor:
        return self.qkv(x)

    def _scores(self, q: torch.Tensor, k: torch.Tensor, n: int) -> torch.Tensor:
        """Scaled dot products plus the relative position bias, [windows, heads, n, n]."""
        attn = (q * q.shape[-1] ** -0.5) @ k.transpose(-2, -1)
        bias = self.relative_position_bias_table[self.relative_position_index]
        return attn + bias.view(n, n, -1).permute(2, 0, 1).unsqueeze(0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, h, w, c = x.shape
        ws, n, d = self.window, self.window * self.window, c // self.heads
        if self.shift:
            x = torch.roll(x, (-self.shift, -self.shift), (1, 2))
        x = x.view(b, h // ws, ws, w // ws, ws, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, n, c)
        qkv = self._projected(x).reshape(x.shape[0], n, 3, self.heads, d)
        qkv = qkv.permute(2, 0, 3, 1, 4)
        attn = self._scores(qkv[0], qkv[1], n)
        v = qkv[2]
        if self.shift:
            windows = self.mask.shape[0]
            attn = attn.view(-1, windows, self.heads, n, n) + self.mask[None, :, None]
            attn = attn.view(-1, self.heads, n, n)
        x = (attn.softmax(dim=-1) @ v).transpose(1, 2).reshape(-1, n, c)
        x = self.proj(x).view(b, h // ws, w // ws, ws, ws, c)
        x = x.permute(0, 1, 3, 2, 4, 5).reshape(b, h, w, c)
        if self.shift:
            x = torch.roll(x, (self.shift, self.shift), (1, 2))
        return x


class WindowAttentionV2(WindowAttention):
    """Swin-V2's window attention as torchvision writes it (``ShiftedWindowAttentionV2``):
    cosine attention (q and k L2-normalised per head, ``F.normalize``) scaled by a learnt
    logit scale per head (``clamp(log_scale, max=log 100).exp()``), and the relative position
    bias ``16 sigmoid`` of a small MLP (2 -> 512 -> heads) over a constant table of
    log-spaced relative coordinates; the key has no bias. The rest is Swin's."""

    def __init__(self, dim: int, heads: int, window: int, shift: int, size: int):
        super().__init__(dim, heads, window, shift, size)
        del self.relative_position_bias_table
        self.logit_scale = nn.Parameter(torch.log(10 * torch.ones((heads, 1, 1))))
        self.cpb_mlp = nn.Sequential(nn.Linear(2, 512), nn.ReLU(), nn.Linear(512, heads,
                                                                             bias=False))
        span = torch.arange(-(window - 1), window, dtype=torch.float32)
        table = torch.stack(torch.meshgrid(span, span, indexing="ij")).permute(1, 2, 0)
        table = table.contiguous().unsqueeze(0) / (window - 1) * 8
        table = torch.sign(table) * torch.log2(table.abs() + 1.0) / 3.0
        self.register_buffer("relative_coords_table", table, persistent=False)

    def _projected(self, x: torch.Tensor) -> torch.Tensor:
        c = x.shape[-1]
        bias = self.qkv.bias.clone()
        bias[c:2 * c] = 0.0  # torchvision's: the key has no bias
        return nn.functional.linear(x, self.qkv.weight, bias)

    def _scores(self, q: torch.Tensor, k: torch.Tensor, n: int) -> torch.Tensor:
        attn = nn.functional.normalize(q, dim=-1) @ nn.functional.normalize(
            k, dim=-1).transpose(-2, -1)
        attn = attn * torch.clamp(self.logit_scale, max=math.log(100.0)).exp()
        table = self.cpb_mlp(self.relative_coords_table).view(-1, self.heads)
        bias = table[self.relative_position_index].view(n, n, -1).permute(2, 0, 1)
        return attn + 16 * torch.sigmoid(bias.unsqueeze(0))


class SwinBlock(nn.Module):
    """x + attn(norm1(x)), then x + mlp(norm2(x)), on [B, H, W, C]."""

    def __init__(self, dim: int, heads: int, window: int, shift: int, size: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = WindowAttention(dim, heads, window, shift, size)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, 4 * dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class SwinBlockV2(SwinBlock):
    """Swin-V2's post-norm block: x + norm1(attn(x)), then x + norm2(mlp(x)), on [B, H, W, C]."""

    def __init__(self, dim: int, heads: int, window: int, shift: int, size: int):
        super().__init__(dim, heads, window, shift, size)
        self.attn = WindowAttentionV2(dim, heads, window, shift, size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.norm1(self.attn(x))
        return x + self.norm2(self.mlp(x))


class PatchMerging(nn.Module):
    """Swin's downsampling: the four 2x2 phases of [B, H, W, C] concatenated on C, layer norm,
    Linear 4C -> 2C."""

    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(4 * dim)
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.cat([x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]],
                      -1)
        return self.reduction(self.norm(x))


class PatchMergingV2(PatchMerging):
    """Swin-V2's downsampling: the phases concatenated, Linear 4C -> 2C, then layer norm."""

    def __init__(self, dim: int):
        super().__init__(dim)
        self.norm = nn.LayerNorm(2 * dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.cat([x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]],
                      -1)
        return self.norm(self.reduction(x))


class SwinTransformer(nn.Module):
    """Swin Transformer (Liu et al., 2021) in torchvision's op order: a 4x4/4 patch conv,
    channels-last + layer norm, stages of (shifted) window blocks with patch merging between
    them, a final layer norm, back to NCHW, global average pool and a Linear head; ``v2``:
    Swin-V2's blocks (post-norm, cosine attention, the continuous position bias:
    :class:`WindowAttentionV2`) and patch merging (the norm after the reduction)."""

    def __init__(self, image: int = 224, dim: int = 32, depths=(2, 2, 2, 2),
                 heads=(1, 2, 4, 8), window: int = 7, num_classes: int = 1000,
                 v2: bool = False):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, 4, 4)
        self.patch_norm = nn.LayerNorm(dim)
        stages: list[nn.Module] = []
        size = image // 4
        for i, (depth, head) in enumerate(zip(depths, heads)):
            shift = window // 2 if size > window else 0
            block = SwinBlockV2 if v2 else SwinBlock
            stages += [block(dim, head, window, shift if j % 2 else 0, size)
                       for j in range(depth)]
            if i + 1 < len(depths):
                stages.append((PatchMergingV2 if v2 else PatchMerging)(dim))
                dim, size = 2 * dim, size // 2
        self.stages = nn.Sequential(*stages)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_norm(self.patch_embed(x).permute(0, 2, 3, 1))
        x = self.norm(self.stages(x)).permute(0, 3, 1, 2)
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def swin_mini(*, batch: int = 1, seed: int = 0) -> ModelAndInputs:
    """A Swin-T-like model: Swin-T's layout (4x4 patches, window 7, shifted windows in every
    second block, patch merging, 3x224x224 input, 1000 classes) at width 32 with [2, 2, 2, 2]
    blocks of [1, 2, 4, 8] heads (Swin-T: 96, [2, 2, 6, 2], [3, 6, 12, 24]). Realistic
    initialisation (He weights, layer norms randomised, relative position biases N(0, 0.1)).
    Input (batch, 3, 224, 224); ``batch`` and ``seed`` as for :func:`get_model`."""
    return _build(SwinTransformer, (3, 224, 224), batch, seed)


def encoder_stack(*, batch: int = 1, seed: int = 0) -> ModelAndInputs:
    """``nn.TransformerEncoder`` of four ``nn.TransformerEncoderLayer(192, 3 heads, MLP 768,
    batch_first, GELU)`` layers on 64 tokens of width 192 (PyTorch's own attention, with its
    post-norm order and fused in-projection). Input (batch, 64, 192); ``batch`` and ``seed``
    as for :func:`get_model`."""
    return _build(lambda: nn.TransformerEncoder(nn.TransformerEncoderLayer(
        192, 3, 768, dropout=0.0, activation="gelu", batch_first=True), 4,
        enable_nested_tensor=False), (64, 192), batch, seed)


class HybridRecogniser(nn.Module):
    """A small text-line recogniser as OCR models build them (SVTR's mixing after a conv
    stem): two strided conv + BN + ReLU layers, the [B, C, H, W] map flattened into tokens,
    a position embedding, two pre-norm transformer blocks, a layer norm and a per-token
    Linear classifier (CTC logits)."""

    def __init__(self, dim: int = 64, heads: int = 2, classes: int = 40):
        super().__init__()
        self.stem = nn.Sequential(*_conv_bn(3, dim // 2, 3, 2), nn.ReLU(),
                                  *_conv_bn(dim // 2, dim, 3, 2), nn.ReLU())
        self.pos_embed = nn.Parameter(torch.zeros(1, 8 * 32, dim))
        self.blocks = nn.Sequential(EncoderBlock(dim, heads), EncoderBlock(dim, heads))
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x).flatten(2).transpose(1, 2) + self.pos_embed
        return self.head(self.norm(self.blocks(x)))


def hybrid_recogniser(*, batch: int = 1, seed: int = 0) -> ModelAndInputs:
    """:class:`HybridRecogniser` on a 3x32x128 text line (256 tokens of width 64, 40
    classes). Input (batch, 3, 32, 128); ``batch`` and ``seed`` as for :func:`get_model`."""
    return _build(HybridRecogniser, (3, 32, 128), batch, seed)


# --------------------------------------------------------------------------------------
# A YOLOv8-style detector
# --------------------------------------------------------------------------------------
class YoloConv(nn.Sequential):
    """Conv (no bias, 'same' padding) + batch norm + SiLU: the detector's building block."""

    def __init__(self, cin: int, cout: int, kernel: int = 1, stride: int = 1):
        super().__init__(*_conv_bn(cin, cout, kernel, stride), nn.SiLU())


class YoloBottleneck(nn.Module):
    """Two 3x3 YoloConvs, with the residual add where asked (the backbone's) and possible."""

    def __init__(self, channels: int, shortcut: bool):
        super().__init__()
        self.cv1 = YoloConv(channels, channels, 3)
        self.cv2 = YoloConv(channels, channels, 3)
        self.add = shortcut

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C2f(nn.Module):
    """CSP bottleneck with two convolutions: a 1x1 conv split in two halves, n bottlenecks on
    the second half, every intermediate concatenated, a 1x1 conv."""

    def __init__(self, cin: int, cout: int, n: int, shortcut: bool):
        super().__init__()
        self.c = cout // 2
        self.cv1 = YoloConv(cin, 2 * self.c)
        self.cv2 = YoloConv((2 + n) * self.c, cout)
        self.m = nn.ModuleList(YoloBottleneck(self.c, shortcut) for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = list(self.cv1(x).chunk(2, 1))
        y.extend(m(y[-1]) for m in self.m)
        return self.cv2(torch.cat(y, 1))


class SPPF(nn.Module):
    """Spatial pyramid pooling, fast: three 5x5 stride-1 max pools in a row, concatenated."""

    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.cv1 = YoloConv(cin, cin // 2)
        self.cv2 = YoloConv(cin // 2 * 4, cout)
        self.m = nn.MaxPool2d(5, 1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.cv1(x)
        y1 = self.m(x)
        y2 = self.m(y1)
        return self.cv2(torch.cat((x, y1, y2, self.m(y2)), 1))


class DFL(nn.Module):
    """Distribution focal loss's integral: each box side's softmax over its 16 bins, times
    the bin indices (a 1x1 conv whose weights are fixed at 0..15, never trained)."""

    def __init__(self, bins: int = 16):
        super().__init__()
        self.bins = bins
        self.conv = nn.Conv2d(bins, 1, 1, bias=False).requires_grad_(False)
        with torch.no_grad():
            self.conv.weight.copy_(torch.arange(bins, dtype=torch.float32).view(1, bins, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, a = x.shape
        return self.conv(x.view(b, 4, self.bins, a).transpose(2, 1).softmax(1)).view(b, 4, a)


class YoloDetect(nn.Module):
    """The decoupled head, as exported for inference: per level a box branch (4 x 16 bins)
    and a class branch, concatenated over the levels' anchors; boxes decoded by DFL and
    dist2bbox (centre and size in input pixels, anchors fixed by the input size); class
    scores through a sigmoid. Output [batch, 4 + classes, anchors]."""

    def __init__(self, classes: int, channels: tuple, size: int, strides=(8, 16, 32)):
        super().__init__()
        self.classes, self.bins = classes, 16
        c2 = max(16, channels[0] // 4, 4 * self.bins)
        c3 = max(channels[0], min(classes, 100))
        self.cv2 = nn.ModuleList(nn.Sequential(YoloConv(c, c2, 3), YoloConv(c2, c2, 3),
                                               nn.Conv2d(c2, 4 * self.bins, 1))
                                 for c in channels)
        self.cv3 = nn.ModuleList(nn.Sequential(YoloConv(c, c3, 3), YoloConv(c3, c3, 3),
                                               nn.Conv2d(c3, classes, 1))
                                 for c in channels)
        self.dfl = DFL(self.bins)
        points, steps = [], []
        for stride in strides:
            n = size // stride
            centre = torch.arange(n, dtype=torch.float32) + 0.5
            sy, sx = torch.meshgrid(centre, centre, indexing="ij")
            points.append(torch.stack((sx, sy), -1).view(-1, 2))
            steps.append(torch.full((n * n, 1), float(stride)))
        self.register_buffer("anchors", torch.cat(points).transpose(0, 1).unsqueeze(0))
        self.register_buffer("strides", torch.cat(steps).transpose(0, 1))

    def forward(self, levels: list) -> torch.Tensor:
        b = levels[0].shape[0]
        outs = [torch.cat((box(x), cls(x)), 1).view(b, 4 * self.bins + self.classes, -1)
                for x, box, cls in zip(levels, self.cv2, self.cv3)]
        box, cls = torch.cat(outs, 2).split((4 * self.bins, self.classes), 1)
        lt, rb = self.dfl(box).chunk(2, 1)
        x1y1, x2y2 = self.anchors - lt, self.anchors + rb
        xywh = torch.cat(((x1y1 + x2y2) / 2, x2y2 - x1y1), 1) * self.strides
        return torch.cat((xywh, cls.sigmoid()), 1)


class YOLOv8(nn.Module):
    """The YOLOv8 architecture (ultralytics' yolov8.yaml: CSP backbone of C2f blocks and
    SPPF, a PAN neck with nearest upsampling and concats, the decoupled anchor-free head),
    at width and depth multiples 0.25 and 0.33 ("n"), written in plain PyTorch (ultralytics'
    module tree is model.0 .. model.22; here the blocks are named by role)."""

    def __init__(self, classes: int = 80, size: int = 320):
        super().__init__()
        c = [16, 32, 64, 128, 256]
        self.stem = YoloConv(3, c[0], 3, 2)
        self.stage1 = nn.Sequential(YoloConv(c[0], c[1], 3, 2), C2f(c[1], c[1], 1, True))
        self.stage2 = nn.Sequential(YoloConv(c[1], c[2], 3, 2), C2f(c[2], c[2], 2, True))
        self.stage3 = nn.Sequential(YoloConv(c[2], c[3], 3, 2), C2f(c[3], c[3], 2, True))
        self.stage4 = nn.Sequential(YoloConv(c[3], c[4], 3, 2), C2f(c[4], c[4], 1, True),
                                    SPPF(c[4], c[4]))
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.top_down4 = C2f(c[4] + c[3], c[3], 1, False)
        self.top_down3 = C2f(c[3] + c[2], c[2], 1, False)
        self.down3 = YoloConv(c[2], c[2], 3, 2)
        self.bottom_up4 = C2f(c[2] + c[3], c[3], 1, False)
        self.down4 = YoloConv(c[3], c[3], 3, 2)
        self.bottom_up5 = C2f(c[3] + c[4], c[4], 1, False)
        self.detect = YoloDetect(classes, (c[2], c[3], c[4]), size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p3 = self.stage2(self.stage1(self.stem(x)))
        p4 = self.stage3(p3)
        p5 = self.stage4(p4)
        t4 = self.top_down4(torch.cat((self.up(p5), p4), 1))
        n3 = self.top_down3(torch.cat((self.up(t4), p3), 1))
        n4 = self.bottom_up4(torch.cat((self.down3(n3), t4), 1))
        n5 = self.bottom_up5(torch.cat((self.down4(n4), p5), 1))
        return self.detect([n3, n4, n5])


def yolov8n(*, batch: int = 1, seed: int = 0) -> ModelAndInputs:
    """:class:`YOLOv8` "n" on a 3x320x320 image (80 classes, 2100 anchors: output
    (batch, 84, 2100), boxes as centre and size in pixels, then class scores). Input (batch,
    3, 320, 320); ``batch`` and ``seed`` as for :func:`get_model`."""
    return _build(YOLOv8, (3, 320, 320), batch, seed)


# --------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------
MODELS: dict[str, Callable[..., ModelAndInputs]] = {
    "lenet5": lenet5,
    "resnet18": resnet18,
    "resnet50": resnet50,
    "resnet50_caffe": resnet50_caffe,
    "vgg11_bn": vgg11_bn,
    "mobilenet_v1": mobilenet_v1,
    "mixed_block": mixed_block,
    "mobilenet_v2": mobilenet_v2,
    "efficientnet_b0": efficientnet_b0,
    "mobilenet_v3_small": mobilenet_v3_small,
    "densenet121": densenet121,
    "googlenet": googlenet,
    "shufflenet_v2": shufflenet_v2,
    "squeezenet1_1": squeezenet1_1,
    "alexnet_lrn": alexnet_lrn,
    "googlenet_lrn": googlenet_lrn,
    "convnext_mini": convnext_mini,
    "vit_ti16": vit_ti16,
    "swin_mini": swin_mini,
    "encoder_stack": encoder_stack,
    "hybrid_recogniser": hybrid_recogniser,
    "yolov8n": yolov8n,
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
